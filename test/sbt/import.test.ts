import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { planCall } from '../../server/cli.ts'
import { fakeAddress, query, startSbtApp, type SbtTestApp } from './support.ts'

let s: SbtTestApp

const BASE = {
  campaigns: [{ id: 'imp', name: 'Import' }],
  groups: [{ id: 'imp-g', campaignId: 'imp', name: 'G' }],
  credentials: [{ id: 'imp-visit', groupId: 'imp-g', name: 'Visit', labelType: 8 }],
  rewards: [{ sbtId: 100, kind: 'referral', groupId: 'imp-g', level: 1, title: 'R', taskName: 'Invite', points: 5, invitesRequired: 3 }],
  users: [
    { suiAddress: fakeAddress(1), inviteCode: 'one' },
    { suiAddress: fakeAddress(2).toUpperCase().replace('0X', ''), inviteCode: 'two', invitedBy: fakeAddress(1), invitedAt: '2026-03-01T00:00:00Z' },
  ],
  results: [{ suiAddress: fakeAddress(1), credentialId: 'imp-visit', status: 1 }],
  clicks: [{ suiAddress: fakeAddress(1), credentialId: 'imp-visit' }],
  claims: [{ suiAddress: fakeAddress(1), sbtId: 100, claimType: 4 }],
}

async function counts() {
  const [row] = await query<Record<string, string | number>>(
    s.app,
    `select (select count(*) from sbt_campaigns) as campaigns, (select count(*) from sbt_credentials) as credentials, (select count(*) from sbt_rewards) as rewards,
            (select count(*) from sbt_users) as users, (select count(*) from sbt_credential_results) as results, (select count(*) from sbt_clicks) as clicks, (select count(*) from sbt_claims) as claims`,
  )
  return Object.fromEntries(Object.entries(row!).map(([name, value]) => [name, Number(value)]))
}

beforeAll(async () => {
  s = await startSbtApp()
}, 120_000)
afterAll(async () => {
  await s.close()
}, 30_000)

describe('POST /ops/v1/sbt/import', () => {
  test('takes campaigns, groups, credentials, rewards, users with invites, results, clicks and claim records', async () => {
    const response = await s.importDocument(BASE)
    expect(response.status).toBe(200)
    expect(response.body).toEqual({ campaigns: 1, groups: 1, credentials: 1, rewards: 1, users: 2, results: 1, clicks: 1, claims: 1, repeated: false })
    expect(await counts()).toEqual({ campaigns: 1, credentials: 1, rewards: 1, users: 2, results: 1, clicks: 1, claims: 1 })
    const record = await s.sbt('GET', `/gonative/user?address=${fakeAddress(1)}`)
    expect(record.body.data.claimedReferralSbts).toEqual([{ level: 1, sbtId: 100, title: 'R', taskName: 'Invite', points: 5, invitesRequired: 3, claimed: true }])
    // The address given in upper case without 0x was normalized.
    expect(record.body.data.invitees).toEqual([{ suiAddress: fakeAddress(2), inviteDate: '2026-03-01T00:00:00.000Z' }])
  })

  test('the same document again changes nothing', async () => {
    const before = await counts()
    const response = await s.importDocument(BASE)
    expect(response.status).toBe(200)
    expect(response.body.repeated).toBe(true)
    expect(await counts()).toEqual(before)
  })

  test('updates by id: a changed reward and campaign replace the old ones', async () => {
    const response = await s.importDocument({ campaigns: [{ id: 'imp', name: 'Renamed', isDefault: true }], rewards: [{ ...BASE.rewards[0]!, title: 'R2', points: 7 }] })
    expect(response.status).toBe(200)
    const [reward] = await query<{ title: string; points: number }>(s.app, 'select title, points from sbt_rewards where sbt_id = 100')
    expect(reward).toEqual({ title: 'R2', points: 7 })
    expect((await counts()).rewards).toBe(1)
  })

  test('takes NDJSON, one item per line with its type', async () => {
    const lines = [
      { type: 'group', id: 'nd-g', campaignId: 'imp', name: 'ND' },
      { type: 'credential', id: 'nd-open', groupId: 'nd-g', name: 'Open', labelType: 20 },
      { type: 'reward', sbtId: 101, kind: 'lockdrop', groupId: 'nd-g', level: 10, title: 'L', taskName: 'Lock', points: 1, usdRequired: 250 },
      { type: 'user', suiAddress: fakeAddress(3), inviteCode: 'three' },
      { type: 'claim', suiAddress: fakeAddress(3), sbtId: 101, claimType: 2 },
    ]
    const response = await s.importDocument({ ndjson: `${lines.map((line) => JSON.stringify(line)).join('\n')}\n\n` })
    expect(response.status).toBe(200)
    expect(response.body).toMatchObject({ groups: 1, credentials: 1, rewards: 1, users: 1, claims: 1, repeated: false })
  })

  test.each([
    ['a labelType above 113', { credentials: [{ id: 'x', groupId: 'imp-g', name: 'x', labelType: 114 }] }, 'credentials.0.labelType'],
    ['an undefined labelType', { credentials: [{ id: 'x', groupId: 'imp-g', name: 'x', labelType: 19 }] }, 'credentials[0].params'],
    ['on-chain params missing', { credentials: [{ id: 'x', groupId: 'imp-g', name: 'x', labelType: 25 }] }, 'credentials[0].params'],
    ['level 0', { rewards: [{ ...BASE.rewards[0]!, sbtId: 102, level: 0 }] }, 'rewards.0.level'],
    ['level 11', { rewards: [{ ...BASE.rewards[0]!, sbtId: 102, level: 11 }] }, 'rewards.0.level'],
    ['a referral without invitesRequired', { rewards: [{ sbtId: 102, kind: 'referral', groupId: 'imp-g', level: 1, title: 't', taskName: 't', points: 1 }] }, 'rewards[0].invitesRequired'],
    ['a lockdrop without usdRequired', { rewards: [{ sbtId: 102, kind: 'lockdrop', groupId: 'imp-g', level: 1, title: 't', taskName: 't', points: 1 }] }, 'rewards[0].usdRequired'],
    ['claimType 1', { claims: [{ suiAddress: fakeAddress(1), sbtId: 100, claimType: 1 }] }, 'claims.0.claimType'],
    ['claimType 6', { claims: [{ suiAddress: fakeAddress(1), sbtId: 100, claimType: 6 }] }, 'claims.0.claimType'],
    ['a malformed address', { users: [{ suiAddress: '0x12', inviteCode: 'bad' }] }, 'users[0].suiAddress'],
    ['a group of an unknown campaign', { groups: [{ id: 'x', campaignId: 'nope', name: 'x' }] }, 'groups[0].campaignId'],
    ['a result of an unknown user', { results: [{ suiAddress: fakeAddress(77), credentialId: 'imp-visit', status: 1 }] }, 'results[0].suiAddress'],
    ['a claim of an unknown SBT', { claims: [{ suiAddress: fakeAddress(1), sbtId: 999, claimType: 4 }] }, 'claims[0].sbtId'],
    ['an unknown field', { campaigns: [{ id: 'x', name: 'x', extra: 1 }] }, 'campaigns.0.extra'],
    ['two default campaigns', { campaigns: [{ id: 'a', name: 'a', isDefault: true }, { id: 'b', name: 'b', isDefault: true }] }, 'campaigns'],
  ])('refuses %s with 400 naming the field, and writes nothing', async (_name, document, field) => {
    const before = await counts()
    const response = await s.importDocument(document)
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe(field)
    expect(await counts()).toEqual(before)
  })

  test('is all or nothing: a bad item late in the document leaves the good ones before it unwritten', async () => {
    const before = await counts()
    const response = await s.importDocument({
      campaigns: [{ id: 'aon', name: 'AON' }],
      users: [{ suiAddress: fakeAddress(50), inviteCode: 'fifty' }],
      claims: [{ suiAddress: fakeAddress(50), sbtId: 12345, claimType: 4 }],
    })
    expect(response.status).toBe(400)
    expect(await counts()).toEqual(before)
    expect(await query(s.app, "select 1 from sbt_campaigns where id = 'aon'")).toEqual([])
  })

  test('refuses a line of NDJSON that is not JSON or has no known type, naming the line', async () => {
    const notJson = await s.importDocument({ ndjson: '{"type":"campaign","id":"z","name":"z"}\n{oops' })
    expect(notJson.status).toBe(400)
    expect(notJson.body.error.field).toBe('line 2')
    const unknownType = await s.importDocument({ ndjson: '{"type":"wallet"}' })
    expect(unknownType.body.error.field).toBe('line 1.type')
  })
})

describe('the CLI', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kassa-sbt-cli-'))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  test('sends a JSON file as the document and an NDJSON file as ndjson', () => {
    const json = join(dir, 'a.json')
    writeFileSync(json, JSON.stringify(BASE))
    expect(planCall(['sbt', 'import', json])).toEqual({ method: 'POST', path: '/ops/v1/sbt/import', body: BASE })
    const ndjson = join(dir, 'a.ndjson')
    writeFileSync(ndjson, '{"type":"campaign","id":"c","name":"c"}\n')
    expect(planCall(['sbt', 'import', ndjson])).toEqual({ method: 'POST', path: '/ops/v1/sbt/import', body: { ndjson: '{"type":"campaign","id":"c","name":"c"}\n' } })
  })

  test('issues, lists and revokes tokens, and asks for the farmable report', () => {
    expect(planCall(['sbt', 'tokens', 'issue', 'production', 'partner', 'one'])).toEqual({ method: 'POST', path: '/ops/v1/sbt/tokens', body: { environment: 'production', label: 'partner one' } })
    expect(planCall(['sbt', 'tokens', 'list'])).toEqual({ method: 'GET', path: '/ops/v1/sbt/tokens' })
    expect(planCall(['sbt', 'tokens', 'revoke', 'sbtk_1'])).toEqual({ method: 'POST', path: '/ops/v1/sbt/tokens/sbtk_1/revoke' })
    expect(planCall(['sbt', 'farmable', 'a/b'])).toEqual({ method: 'GET', path: '/ops/v1/sbt/campaigns/a%2Fb/farmable' })
    expect(() => planCall(['sbt', 'tokens', 'issue', 'sandbox'])).toThrow('environment must be one of staging, production')
    expect(() => planCall(['sbt', 'import', join(dir, 'missing.json')])).toThrow('no such file')
  })
})

/** Starting the embedded database on disk takes long on a busy machine: longer than the shared helper waits. */
const PROCESS_START_TIMEOUT_MS = 150_000

/** Reads a spawned server's stdout until it prints both listeners' addresses. */
async function listenersOf(child: { stdout: ReadableStream<Uint8Array> }): Promise<{ main: string; sbt: string }> {
  const reader = child.stdout.getReader()
  const decoder = new TextDecoder()
  let seen = ''
  const deadline = Date.now() + PROCESS_START_TIMEOUT_MS
  while (Date.now() < deadline) {
    const { done, value } = await reader.read()
    if (done) break
    seen += decoder.decode(value)
    const main = /listening on (http:\/\/[\d.]+:\d+)/.exec(seen)
    const sbt = /SBT data API on (http:\/\/[\d.]+:\d+)/.exec(seen)
    if (main && sbt) {
      reader.releaseLock()
      return { main: main[1]!, sbt: sbt[1]! }
    }
  }
  throw new Error(`the server did not print both listeners:\n${seen}`)
}

describe('npm start', () => {
  test('serves the SBT listener beside the main one; the CLI issues and revokes its tokens', async () => {
    const { spawnServerProcess } = await import('../support/server-process.ts')
    const { createTestDatabase } = await import('../support/db.ts')
    const dataDir = mkdtempSync(join(tmpdir(), 'kassa-sbt-process-'))
    const database = await createTestDatabase()
    const child = spawnServerProcess({ DATA_DIR: dataDir, SERVICE_ENV: 'sandbox', OPERATOR_TOKEN: '', DATABASE_URL: database.databaseUrl ?? '', WEBHOOK_DELIVERY_PROCESS: 'false' })
    try {
      const { main, sbt: sbtUrl } = await listenersOf(child)
      const cli = async (args: string[]) => {
        const run = Bun.spawn([process.execPath, 'server/cli.ts', ...args], { cwd: resolve(import.meta.dir, '../..'), env: { ...process.env, KASSA_URL: main, DATA_DIR: dataDir, OPERATOR_TOKEN: '' }, stdout: 'pipe', stderr: 'pipe' })
        const [exitCode, stdout] = await Promise.all([run.exited, new Response(run.stdout).text()])
        return { exitCode, body: exitCode === 0 ? JSON.parse(stdout) : stdout }
      }
      const issued = await cli(['sbt', 'tokens', 'issue', 'staging', 'process test'])
      expect(issued.exitCode).toBe(0)
      const answer = await fetch(`${sbtUrl}/gonative/all-users`, { headers: { authorization: issued.body.token } })
      expect(answer.status).toBe(200)
      expect(await answer.json()).toEqual({ code: 0, message: 'success', data: { users: [], pagination: { currentPage: 1, pageSize: 10, totalUsers: 0, totalPages: 0 } } })
      expect((await cli(['sbt', 'tokens', 'revoke', issued.body.id])).exitCode).toBe(0)
      const refused = await fetch(`${sbtUrl}/gonative/all-users`, { headers: { authorization: issued.body.token } })
      expect(refused.status).toBe(401)
    } finally {
      child.kill('SIGTERM')
      await child.exited
      await database.drop()
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, PROCESS_START_TIMEOUT_MS + 30_000)
})
