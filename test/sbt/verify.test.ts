import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { createHmac } from 'node:crypto'
import { LABEL_TYPE_MAX, LABEL_TYPES, NON_ENFORCING_FAMILIES } from '../../server/modules/sbt/registry.ts'
import { makeCertificate, type Certificate } from '../webhooks/receivers.ts'
import { newWallet, query, startSbtApp, type SbtTestApp, type Wallet } from './support.ts'

let s: SbtTestApp
let certificate: Certificate
let issuer: ReturnType<typeof Bun.serve>
const SECRET = 'issuer-secret-0123456789'
/** What the issuer's Verify API received, with whether its signature checked out. */
const received: Array<{ path: string; body: any; signatureValid: boolean }> = []
/** Addresses the issuer says did its task. */
const doneAtIssuer = new Set<string>()

let rich: Wallet
let poor: Wallet

function credential(id: string, labelType: number, params: Record<string, unknown> = {}) {
  return { id, groupId: 'g', name: id, labelType, params }
}

beforeAll(async () => {
  certificate = makeCertificate()
  issuer = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { cert: certificate.cert, key: certificate.key },
    async fetch(request) {
      const path = new URL(request.url).pathname
      const raw = await request.text()
      const header = request.headers.get('x-kassa-signature') ?? ''
      const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header)
      const signatureValid = match !== null && createHmac('sha256', SECRET).update(`${match[1]}.${raw}`).digest('hex') === match[2]
      const body = JSON.parse(raw)
      received.push({ path, body, signatureValid })
      if (path === '/slow') await Bun.sleep(6000)
      if (path === '/broken') return new Response('oops', { status: 500 })
      if (path === '/not-json') return new Response('yes', { status: 200 })
      return Response.json({ verified: signatureValid && doneAtIssuer.has(body.suiAddress) })
    },
  })
  const issuerUrl = `https://localhost:${issuer.port}`
  // Long enough for any issuer here but /slow, which never answers in time: the test waits it out.
  s = await startSbtApp({ webhookCaFile: certificate.certFile, allowLoopbackWebhooks: true, sbtVerifyTimeoutMs: 1000 })
  rich = newWallet()
  poor = newWallet()
  const imported = await s.importDocument({
    campaigns: [{ id: 'c', name: 'Campaign' }],
    groups: [{ id: 'g', campaignId: 'c', name: 'All families' }],
    credentials: [
      credential('visit', 8),
      credential('vote', 12),
      credential('story', 72),
      credential('open-trade', 20),
      credential('ton-wallet', 23),
      credential('evm-wallet', 24),
      credential('sui-wallet', 86),
      credential('bsc-wallet', 102),
      credential('x-account', 73),
      credential('chat-account', 94),
      credential('sui-usdc', 25, { fact: 'balance:USDC', min: '100000000' }),
      credential('ton-balance', 31, { fact: 'balance:TON', min: '5' }),
      credential('bsc-bnb', 35, { fact: 'balance:BNB', min: 1 }),
      credential('holds-500', 41, { sbtId: 500 }),
      credential('invites-2', 44, { min: 2 }),
      credential('points-10', 46, { min: 10 }),
      credential('score-50', 47, { min: 50 }),
      credential('streak-7', 48, { min: 7 }),
      credential('custom', 40, { url: `${issuerUrl}/verify`, secret: SECRET }),
      credential('custom-slow', 40, { url: `${issuerUrl}/slow`, secret: SECRET }),
      credential('custom-broken', 40, { url: `${issuerUrl}/broken`, secret: SECRET }),
      credential('custom-not-json', 40, { url: `${issuerUrl}/not-json`, secret: SECRET }),
      credential('follow', 1),
    ],
    rewards: [{ sbtId: 500, kind: 'social', groupId: 'g', level: 1, title: 'Held', taskName: 'Hold', points: 15 }],
    users: [
      {
        suiAddress: rich.address,
        inviteCode: 'rich',
        bindings: { ton: 'EQD-ton-wallet', evm: '0x00000000000000000000000000000000000000aa', bsc: '0x00000000000000000000000000000000000000bb', x: 'rich_on_x', discord: 'rich#1' },
        score: 50,
        streakDays: 7,
      },
      { suiAddress: poor.address, inviteCode: 'poor', bindings: { x: '   ' }, score: 49, streakDays: 6 },
      { suiAddress: '0x' + '1'.repeat(64), inviteCode: 'i1', invitedBy: rich.address },
      { suiAddress: '0x' + '2'.repeat(64), inviteCode: 'i2', invitedBy: rich.address },
      { suiAddress: '0x' + '3'.repeat(64), inviteCode: 'i3', invitedBy: poor.address },
    ],
    claims: [{ suiAddress: rich.address, sbtId: 500, claimType: 4 }],
  })
  expect(imported.status).toBe(200)
  for (const [chain, address, fact, amount] of [
    ['sui', rich.address, 'balance:USDC', '100000000'],
    ['sui', poor.address, 'balance:USDC', '99999999'],
    ['ton', 'EQD-ton-wallet', 'balance:TON', '5'],
    ['bsc', '0x00000000000000000000000000000000000000bb', 'balance:BNB', '2'],
  ]) {
    const set = await s.app.ops('PUT', '/ops/v1/sbt/sandbox/chain-facts', { chain, address, fact, amount })
    expect(set.status).toBe(200)
  }
  doneAtIssuer.add(rich.address)
}, 120_000)
afterAll(async () => {
  await s.close()
  issuer.stop(true)
  certificate.remove()
}, 30_000)

async function verify(wallet: Wallet, credentialId: string) {
  return s.sbt('POST', `/campaignNew/credential/${credentialId}/verify`, { body: await s.proof(wallet) })
}

async function resultRows(wallet: Wallet, credentialId: string): Promise<number> {
  const rows = await query(s.app, `select 1 from sbt_credential_results x join sbt_users u on u.id = x.user_id where u.sui_address = '${wallet.address}' and x.credential_id = '${credentialId}' and x.status = 1`)
  return rows.length
}

/** One row per credential: who passes and who does not. */
const FAMILIES: Array<[string, string]> = [
  ['sui-usdc', 'on-chain Sui balance at or above the minimum'],
  ['ton-balance', 'on-chain TON balance of the bound TON wallet'],
  ['bsc-bnb', 'on-chain BSC balance of the bound BSC wallet'],
  ['ton-wallet', 'TON wallet bound'],
  ['evm-wallet', 'EVM wallet bound'],
  ['bsc-wallet', 'BSC wallet bound'],
  ['x-account', 'microblogging account name non-empty'],
  ['chat-account', 'chat account name non-empty'],
  ['holds-500', 'SBT held (claimType 4)'],
  ['invites-2', 'at least 2 invitees'],
  ['points-10', 'points of claimed SBTs'],
  ['score-50', 'score'],
  ['streak-7', 'streak'],
  ['custom', "the issuer's Verify API"],
]

describe('POST /campaignNew/credential/{id}/verify, family by family', () => {
  test.each(FAMILIES)('%s (%s): passes for the user who qualifies and writes a status-1 row', async (credentialId) => {
    const response = await verify(rich, credentialId)
    expect(response.status).toBe(200)
    expect(response.body.code).toBe(0)
    expect(response.body.data).toMatchObject({ credentialId, status: 1, reason: null })
    expect(await resultRows(rich, credentialId)).toBe(1)
  })

  test.each(FAMILIES)('%s (%s): does not pass for the user who does not, and writes nothing', async (credentialId) => {
    const response = await verify(poor, credentialId)
    expect(response.status).toBe(200)
    expect(response.body.data.status).toBe(0)
    expect(response.body.data.reason).toEqual(expect.any(String))
    expect(await resultRows(poor, credentialId)).toBe(0)
  })

  test('click-to-verify (8, 12, 72) passes once a click is recorded, and only for that credential', async () => {
    const wallet = newWallet()
    for (const id of ['visit', 'vote', 'story']) expect((await verify(wallet, id)).body.data.status).toBe(0)
    const click = await s.sbt('POST', '/campaignNew/credential/visit/click', { body: await s.proof(wallet) })
    expect(click.status).toBe(200)
    expect(click.body.data).toEqual({ credentialId: 'visit', recorded: true })
    expect((await verify(wallet, 'visit')).body.data.status).toBe(1)
    expect((await verify(wallet, 'vote')).body.data.status).toBe(0)
    await s.sbt('POST', '/campaignNew/credential/vote/click', { body: await s.proof(wallet) })
    await s.sbt('POST', '/campaignNew/credential/story/click', { body: await s.proof(wallet) })
    expect((await verify(wallet, 'vote')).body.data.status).toBe(1)
    expect((await verify(wallet, 'story')).body.data.status).toBe(1)
  })

  test('open-trade (20) always passes; a Sui wallet (86) is bound by signing in with it', async () => {
    const wallet = newWallet()
    expect((await verify(wallet, 'open-trade')).body.data.status).toBe(1)
    expect((await verify(wallet, 'sui-wallet')).body.data.status).toBe(1)
  })

  test('verifying again writes another row: duplicates are allowed', async () => {
    const wallet = newWallet()
    await verify(wallet, 'open-trade')
    await verify(wallet, 'open-trade')
    expect(await resultRows(wallet, 'open-trade')).toBe(2)
  })

  test("the issuer's Verify API is called over HTTPS with an HMAC-signed body naming the user", async () => {
    const before = received.length
    await verify(rich, 'custom')
    const call = received.slice(before).find((entry) => entry.path === '/verify')!
    expect(call.signatureValid).toBe(true)
    expect(call.body).toMatchObject({ credentialId: 'custom', suiAddress: rich.address })
  })

  test.each([
    ['custom-slow', 'no answer within'],
    ['custom-broken', 'HTTP 500'],
    ['custom-not-json', 'JSON'],
  ])('an issuer that fails (%s) is 502 with code 50201, never a pass', async (credentialId, words) => {
    const response = await verify(rich, credentialId)
    expect(response.status).toBe(502)
    expect(response.body.code).toBe(50201)
    expect(response.body.message).toContain(words)
    expect(await resultRows(rich, credentialId)).toBe(0)
  })

  test('a Verify API URL on a private or metadata address is refused at import and at verify', async () => {
    for (const url of ['https://10.0.0.1/verify', 'https://169.254.169.254/latest', 'http://example.com/verify']) {
      const response = await s.importDocument({ credentials: [credential('bad-url', 40, { url, secret: SECRET })] })
      expect(response.status).toBe(400)
      expect(response.body.error.field).toBe('credentials[0].params.url')
    }
    await query(s.app, `insert into sbt_credentials (id, group_id, name, label_type, params) values ('sneaky', 'g', 'sneaky', 40, '{"url":"https://10.1.2.3/v","secret":"${SECRET}"}')`)
    const response = await verify(rich, 'sneaky')
    expect(response.status).toBe(502)
    expect(response.body.code).toBe(50201)
    expect(response.body.message).toContain('refused')
  })

  test('a labelType needing a platform API (1) is 422 with code 42202, never a silent pass', async () => {
    const response = await verify(rich, 'follow')
    expect(response.status).toBe(422)
    expect(response.body.code).toBe(42202)
    expect(await resultRows(rich, 'follow')).toBe(0)
  })

  test('an undefined labelType is 422 with code 42202', async () => {
    await query(s.app, `insert into sbt_credentials (id, group_id, name, label_type) values ('undefined-19', 'g', 'undefined', 19)`)
    const response = await verify(rich, 'undefined-19')
    expect(response.status).toBe(422)
    expect(response.body.code).toBe(42202)
    expect(response.body.message).toContain('not defined')
  })

  test('an unknown credential is 404 with code 40402', async () => {
    const response = await verify(rich, 'nope')
    expect(response.status).toBe(404)
    expect(response.body.code).toBe(40402)
  })

  test('a verify that completes a group makes its rewards eligible (claimType 2)', async () => {
    await s.importDocument({
      groups: [{ id: 'g2', campaignId: 'c', name: 'Two' }],
      credentials: [{ id: 'g2-open', groupId: 'g2', name: 'open', labelType: 20 }, { id: 'g2-sui', groupId: 'g2', name: 'sui', labelType: 86 }],
      rewards: [{ sbtId: 600, kind: 'social', groupId: 'g2', level: 1, title: 'Two', taskName: 'Two', points: 1 }],
    })
    const wallet = newWallet()
    await verify(wallet, 'g2-open')
    const claimType = () => query<{ claim_type: number }>(s.app, `select c.claim_type from sbt_claims c join sbt_users u on u.id = c.user_id where u.sui_address = '${wallet.address}' and c.sbt_id = 600`)
    expect(await claimType()).toEqual([])
    await verify(wallet, 'g2-sui')
    expect((await claimType()).map((row) => Number(row.claim_type))).toEqual([2])
  })
})

describe('the labelType registry', () => {
  test('lists values up to 113, each with one verifier family', () => {
    expect(Math.max(...LABEL_TYPES.keys())).toBe(LABEL_TYPE_MAX)
    expect(LABEL_TYPE_MAX).toBe(113)
    for (const [labelType, entry] of LABEL_TYPES) {
      expect(labelType).toBeGreaterThanOrEqual(1)
      expect(entry.labelType).toBe(labelType)
      expect(['click', 'always', 'wallet_bound', 'account_named', 'onchain', 'sbt_holding', 'invites', 'points', 'custom_api', 'platform_api']).toContain(entry.family)
      if (entry.family === 'onchain') expect(['sui', 'ton', 'bsc']).toContain(entry.chain!)
    }
  })

  test("puts the contract's named labelTypes in the contract's families", () => {
    const family = (labelType: number) => LABEL_TYPES.get(labelType)?.family
    for (const labelType of [8, 12, 72]) expect(family(labelType)).toBe('click')
    expect(family(20)).toBe('always')
    for (const labelType of [23, 24, 86, 102]) expect(family(labelType)).toBe('wallet_bound')
    for (const labelType of [73, 94]) expect(family(labelType)).toBe('account_named')
    expect(family(40)).toBe('custom_api')
    for (const name of ['click', 'always', 'wallet_bound', 'account_named'] as const) expect(NON_ENFORCING_FAMILIES.has(name)).toBe(true)
    for (const name of ['onchain', 'custom_api'] as const) expect(NON_ENFORCING_FAMILIES.has(name)).toBe(false)
  })
})

describe('the farmable report', () => {
  test('lists the credentials that enforce nothing, and the rewards they alone unlock', async () => {
    await s.importDocument({
      campaigns: [{ id: 'farm', name: 'Farm' }],
      groups: [{ id: 'farm-clicks', campaignId: 'farm', name: 'Clicks only' }, { id: 'farm-mixed', campaignId: 'farm', name: 'Mixed' }],
      credentials: [
        { id: 'farm-visit', groupId: 'farm-clicks', name: 'Visit', labelType: 8 },
        { id: 'farm-x', groupId: 'farm-clicks', name: 'Connect X', labelType: 73 },
        { id: 'farm-open', groupId: 'farm-mixed', name: 'Open trade', labelType: 20 },
        { id: 'farm-chain', groupId: 'farm-mixed', name: 'Hold USDC', labelType: 25, params: { fact: 'balance:USDC', min: '1' } },
      ],
      rewards: [
        { sbtId: 700, kind: 'social', groupId: 'farm-clicks', level: 1, title: 'Free', taskName: 'Click', points: 1 },
        { sbtId: 701, kind: 'social', groupId: 'farm-mixed', level: 2, title: 'Earned', taskName: 'Hold', points: 2 },
      ],
    })
    const response = await s.app.ops('GET', '/ops/v1/sbt/campaigns/farm/farmable')
    expect(response.status).toBe(200)
    expect(response.body.farmableCredentialIds).toEqual(['farm-visit', 'farm-x', 'farm-open'])
    expect(response.body.rewards).toEqual([
      { sbtId: 700, title: 'Free', groupId: 'farm-clicks', farmable: true },
      { sbtId: 701, title: 'Earned', groupId: 'farm-mixed', farmable: false },
    ])
    expect(response.body.credentials.find((entry: { id: string }) => entry.id === 'farm-chain')).toMatchObject({ family: 'onchain', enforces: true })
    expect((await s.app.ops('GET', '/ops/v1/sbt/campaigns/nope/farmable')).status).toBe(404)
  })
})
