import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { and, eq, sql } from 'drizzle-orm'
import postgres from 'postgres'
import { queryRows } from '../../db/client.ts'
import { idempotencyRecords } from '../../db/schema/index.ts'
import { sha256Hex } from '../../server/lib/hash.ts'
import { canonicalJson } from '../../server/platform/idempotency.ts'
import { OWNER_LOCK_CLASS, ownerLockKey } from '../../server/platform/idempotency-owners.ts'
import { onPostgres } from '../support/db.ts'
import { callApp, startTestApp, type TestApp, type TestOrg } from '../support/app.ts'
import { SUI_DESTINATION, withdrawalFixture } from '../withdrawals/support.ts'

/** Headers a replay may give differently from the first answer (docs/idempotency.md). */
const MAY_DIFFER = new Set(['idempotent-replayed', 'x-request-id', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'date'])

let app: TestApp
let org: TestOrg
let rich: string
let sink: string

beforeAll(async () => {
  app = await startTestApp()
  org = await app.createOrg('Once')
  rich = (await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'rich' } })).body.id
  sink = (await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'sink' } })).body.id
  expect((await app.call('POST', `/v1/sandbox/accounts/${rich}/fund`, { key: org.testKey, body: { asset: 'USDC', amount: '1000' } })).status).toBe(201)
}, 60_000)
afterAll(async () => {
  await app.close()
})

/** The raw answer: status, text and every header. */
async function raw(method: string, path: string, body: unknown, idempotencyKey: string, key = org.testKey) {
  const response = await app.kassa.handle(
    new Request(`http://kassa.test${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  )
  return { status: response.status, text: await response.text(), headers: Object.fromEntries(response.headers) }
}

const kept = (headers: Record<string, string>) => Object.fromEntries(Object.entries(headers).filter(([name]) => !MAY_DIFFER.has(name)))

async function record(orgId: string, key: string) {
  const [row] = await app.kassa.runtime.db.select().from(idempotencyRecords).where(and(eq(idempotencyRecords.orgId, orgId), eq(idempotencyRecords.key, key)))
  return row
}

async function count(table: string, where: string): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql.raw(`select count(*)::int as count from ${table} where ${where}`))
  return row!.count
}

describe('a money-moving request commits its key with its effect', () => {
  test('a transfer\'s record is completed with its exact answer, and a replay is that answer byte for byte, headers included', async () => {
    const body = { sourceAccountId: rich, destinationAccountId: sink, asset: 'USDC', amount: '1', description: 'bytes' }
    const first = await raw('POST', '/v1/transfers', body, 'bytes-1')
    expect(first.status).toBe(201)
    expect(first.headers['content-type']).toBe('application/json;charset=utf-8')
    const saved = await record(org.id, 'bytes-1')
    expect(saved?.state).toBe('completed')
    expect(saved?.responseBody).toBe(first.text)
    const replay = await raw('POST', '/v1/transfers', body, 'bytes-1')
    expect(replay.status).toBe(201)
    expect(replay.text).toBe(first.text)
    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect(kept(replay.headers)).toEqual(kept(first.headers))
    expect(await count('transfers', "description = 'bytes'")).toBe(1)
  })

  test('a refusal is replayed byte for byte too, and the refused transfer is never run again', async () => {
    const body = { sourceAccountId: sink, destinationAccountId: rich, asset: 'USDC', amount: '5000', description: 'too much' }
    const first = await raw('POST', '/v1/transfers', body, 'refused-1')
    expect(first.status).toBe(422)
    // Money arrives meanwhile: a replay still answers the refusal, and nothing moves.
    await app.call('POST', `/v1/sandbox/accounts/${sink}/fund`, { key: org.testKey, body: { asset: 'USDC', amount: '6000' } })
    const replay = await raw('POST', '/v1/transfers', body, 'refused-1')
    expect(replay.status).toBe(422)
    expect(replay.text).toBe(first.text)
    expect(kept(replay.headers)).toEqual(kept(first.headers))
    expect(await count('transfers', "description = 'too much'")).toBe(0)
  })

  test('a hold, its capture and another\'s release replay their first answers and move money once', async () => {
    const hold = await raw('POST', '/v1/holds', { accountId: rich, asset: 'USDC', amount: '2', expiresInSeconds: 600 }, 'hold-1')
    expect(hold.status).toBe(201)
    expect((await raw('POST', '/v1/holds', { accountId: rich, asset: 'USDC', amount: '2', expiresInSeconds: 600 }, 'hold-1')).text).toBe(hold.text)
    const holdId = JSON.parse(hold.text).id
    expect(await count('holds', `account_id = '${rich}'`)).toBe(1)
    const capture = await raw('POST', `/v1/holds/${holdId}/capture`, { destinationAccountId: sink }, 'capture-1')
    expect(capture.status).toBe(200)
    const again = await raw('POST', `/v1/holds/${holdId}/capture`, { destinationAccountId: sink }, 'capture-1')
    expect(again.status).toBe(200)
    expect(again.text).toBe(capture.text)
    expect(await count('transfers', `hold_id = '${holdId}'`)).toBe(1)
    const other = JSON.parse((await raw('POST', '/v1/holds', { accountId: rich, asset: 'USDC', amount: '3', expiresInSeconds: 600 }, 'hold-2')).text).id
    const release = await raw('POST', `/v1/holds/${other}/release`, undefined, 'release-1')
    expect(release.status).toBe(200)
    const replayed = await raw('POST', `/v1/holds/${other}/release`, undefined, 'release-1')
    expect(replayed.status).toBe(200)
    expect(replayed.text).toBe(release.text)
  })

  test('a quote and a declared deposit commit their key in the transaction that writes them', async () => {
    const quoteBody = { kind: 'withdrawal', accountId: rich, asset: 'USDC', amount: '100' }
    const quote = await raw('POST', '/v1/quotes', quoteBody, 'quote-1')
    expect(quote.status).toBe(201)
    expect((await record(org.id, 'quote-1'))?.responseBody).toBe(quote.text)
    const again = await raw('POST', '/v1/quotes', quoteBody, 'quote-1')
    expect(again.text).toBe(quote.text)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(await count('quotes', `account_id = '${rich}'`)).toBe(1)
    const depositBody = { accountId: rich, asset: 'USDC', network: 'sui', amount: '25' }
    const deposit = await raw('POST', '/v1/deposits', depositBody, 'deposit-1')
    expect(deposit.status).toBe(201)
    expect((await record(org.id, 'deposit-1'))?.responseBody).toBe(deposit.text)
    expect((await raw('POST', '/v1/deposits', depositBody, 'deposit-1')).text).toBe(deposit.text)
    expect(await count('deposits', `account_id = '${rich}' and source = 'declared'`)).toBe(1)
  })

  test('a withdrawal commits its key with its reservation and replays its first answer', async () => {
    const fx = await withdrawalFixture(app, 'Keyed withdrawals')
    const holder = await fx.mint('holder')
    await fx.fund(holder, '1000')
    const body = { accountId: holder, allowlistEntryId: await fx.activeEntry(holder, 'sui', SUI_DESTINATION), quoteId: await fx.quote(holder, '100') }
    const first = await raw('POST', '/v1/withdrawals', body, 'withdraw-1', fx.org.testKey)
    expect(first.status).toBe(201)
    expect((await record(fx.org.id, 'withdraw-1'))?.responseBody).toBe(first.text)
    const again = await raw('POST', '/v1/withdrawals', body, 'withdraw-1', fx.org.testKey)
    expect(again.status).toBe(201)
    expect(again.text).toBe(first.text)
    expect(await count('withdrawals', `account_id = '${holder}'`)).toBe(1)
  })

  test('two concurrent transfers with one key move money once', async () => {
    const body = { sourceAccountId: rich, destinationAccountId: sink, asset: 'USDC', amount: '1', description: 'race' }
    const answers = await Promise.all([raw('POST', '/v1/transfers', body, 'race-1'), raw('POST', '/v1/transfers', body, 'race-1')])
    expect(answers.some((answer) => answer.status === 201)).toBe(true)
    for (const answer of answers) expect([201, 409]).toContain(answer.status)
    expect(await count('transfers', "description = 'race'")).toBe(1)
  })
})

describe('writes that claim their key first', () => {
  test('replay the first answer byte for byte, headers included', async () => {
    const first = await raw('POST', '/v1/accounts', { externalId: 'claimed-bytes' }, 'claimed-bytes-1')
    expect(first.status).toBe(201)
    const replay = await raw('POST', '/v1/accounts', { externalId: 'claimed-bytes' }, 'claimed-bytes-1')
    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect(replay.text).toBe(first.text)
    expect(kept(replay.headers)).toEqual(kept(first.headers))
    const refused = await raw('POST', '/v1/holds/hold_unknown/release', undefined, 'claimed-refusal-1')
    const refusedAgain = await raw('POST', '/v1/holds/hold_unknown/release', undefined, 'claimed-refusal-1')
    expect(refusedAgain.status).toBe(refused.status)
    expect(refusedAgain.text).toBe(refused.text)
    expect(kept(refusedAgain.headers)).toEqual(kept(refused.headers))
  })
})

describe('a claim whose owner process is gone', () => {
  const body = { externalId: 'orphan-1' }
  const insertClaim = async (key: string, owner: string, claimed: Record<string, unknown> = body) =>
    app.kassa.runtime.db.insert(idempotencyRecords).values({
      orgId: org.id,
      key,
      method: 'POST',
      path: '/v1/accounts',
      requestHash: sha256Hex(`POST /v1/accounts\n${canonicalJson(claimed)}`),
      requestBody: claimed,
      state: 'in_progress',
      owner,
      // Its lock has a minute left: only knowing the owner is gone lets a retry run now.
      lockedUntil: new Date(Date.now() + 60_000),
      expiresAt: new Date(Date.now() + 24 * 3600_000),
    })

  test('is taken over at once, without waiting for its lock to lapse', async () => {
    await insertClaim('orphan-key', 'own_of_a_process_that_died')
    const response = await app.call('POST', '/v1/accounts', { key: org.testKey, body, headers: { 'idempotency-key': 'orphan-key' } })
    expect(response.status).toBe(201)
    const replay = await app.call('POST', '/v1/accounts', { key: org.testKey, body, headers: { 'idempotency-key': 'orphan-key' } })
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.body.id).toBe(response.body.id)
  })

  if (onPostgres) {
    test('while its owner holds its advisory lock (another process running), the claim stays in progress', async () => {
      const owner = 'own_of_a_process_still_running'
      const running = { externalId: 'orphan-2' }
      const other = postgres(app.config.databaseUrl!, { max: 1, onnotice: () => {} })
      try {
        await other`select pg_advisory_lock(${OWNER_LOCK_CLASS}::int, ${ownerLockKey(owner)}::int)`
        await insertClaim('running-owner-key', owner, running)
        const response = await app.call('POST', '/v1/accounts', { key: org.testKey, body: running, headers: { 'idempotency-key': 'running-owner-key' } })
        expect(response.status).toBe(409)
        expect(response.body.error.code).toBe('idempotency_in_progress')
      } finally {
        await other.end()
      }
      // Its process gone (the session ended), the retry runs at once.
      const response = await app.call('POST', '/v1/accounts', { key: org.testKey, body: running, headers: { 'idempotency-key': 'running-owner-key' } })
      expect(response.status).toBe(201)
    })
  }
})

describe('operators', () => {
  test('creating an organization twice with one Idempotency-Key creates one organization', async () => {
    const send = () => callApp(app.kassa, 'POST', '/ops/v1/orgs', { body: { name: 'Twice' }, headers: { authorization: `Bearer ${app.config.operatorToken}`, 'idempotency-key': 'org-once' } })
    const first = await send()
    const second = await send()
    expect(first.status).toBe(201)
    expect(second.status).toBe(201)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    expect(second.body.id).toBe(first.body.id)
    expect(await count('organizations', "name = 'Twice'")).toBe(1)
    // The operators' keys are their own: the same key under an organization is another key.
    expect((await record('@operator', 'org-once'))?.state).toBe('completed')
    const conflict = await callApp(app.kassa, 'POST', '/ops/v1/orgs', { body: { name: 'Other' }, headers: { authorization: `Bearer ${app.config.operatorToken}`, 'idempotency-key': 'org-once' } })
    expect(conflict.status).toBe(409)
    expect(conflict.body.error.code).toBe('idempotency_conflict')
  })

  test('issuing and rotating a key twice with one Idempotency-Key does it once', async () => {
    const ops = (path: string, body: unknown, key: string) => callApp(app.kassa, 'POST', path, { body, headers: { authorization: `Bearer ${app.config.operatorToken}`, 'idempotency-key': key } })
    const keysBefore = await count('api_keys', `org_id = '${org.id}'`)
    const issued = await ops(`/ops/v1/orgs/${org.id}/keys`, { type: 'test', environment: 'sandbox' }, 'issue-once')
    expect(issued.status).toBe(201)
    const reissued = await ops(`/ops/v1/orgs/${org.id}/keys`, { type: 'test', environment: 'sandbox' }, 'issue-once')
    expect(reissued.body.id).toBe(issued.body.id)
    expect(await count('api_keys', `org_id = '${org.id}'`)).toBe(keysBefore + 1)
    const rotated = await ops(`/ops/v1/keys/${issued.body.id}/rotate`, { overlapSeconds: 60 }, 'rotate-once')
    expect(rotated.status).toBe(201)
    const rerotated = await ops(`/ops/v1/keys/${issued.body.id}/rotate`, { overlapSeconds: 60 }, 'rotate-once')
    expect(rerotated.body.key.id).toBe(rotated.body.key.id)
    expect(await count('api_keys', `org_id = '${org.id}'`)).toBe(keysBefore + 2)
  })
})
