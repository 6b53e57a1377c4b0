import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { createVault, eventsOf, intentRows, openCycleOf } from './support.ts'

let app: TestApp
let fx: LedgerFixture
let alice: string
let bob: string

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app)
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  await fx.fund(alice, '1000')
  await fx.fund(bob, '1000')
  await createVault(app, 'listed', { subscriptionFeeBps: 100 })
}, 60_000)
afterAll(async () => {
  await app.close()
}, 30_000)

describe('an operator reads a cycle with its intents', () => {
  test('lists every intent with its account and totals the confirmed ones a close, settle or roll back acts on', async () => {
    const cycle = await openCycleOf(app, 'listed', 'deposit')
    const one = await fx.call('POST', '/v1/subscriptions', { accountId: alice, vaultId: 'listed', amount: '100' })
    const two = await fx.call('POST', '/v1/subscriptions', { accountId: bob, vaultId: 'listed', amount: '50' })
    const three = await fx.call('POST', '/v1/subscriptions', { accountId: alice, vaultId: 'listed', amount: '10' })
    expect([one.status, two.status, three.status]).toEqual([201, 201, 201])
    expect((await fx.call('POST', '/v1/subscriptions/cancel', { recordId: three.body.recordId })).status).toBe(200)

    const read = await app.ops('GET', `/ops/v1/vault-cycles/${cycle.cycleId}/intents`)
    expect(read.status).toBe(200)
    expect(read.body.cycle).toMatchObject({ cycleId: cycle.cycleId, vaultId: 'listed', cycleKind: 'deposit', state: 'open' })
    // 1 % fee rounded up: 100 -> 99 net + 1 fee, 50 -> 49.5 + 0.5.
    expect(read.body.pending).toEqual({ intents: 2, accounts: 2, amount: '148.500000', fee: '1.500000', shares: '0.000000' })
    expect(read.body.hasMore).toBe(false)
    expect(read.body.intents.map((intent: any) => [intent.id, intent.orgId, intent.accountId, intent.externalId, intent.state, intent.reason, intent.amount, intent.fee])).toEqual([
      [one.body.id, fx.org.id, alice, 'alice', 'confirmed', null, '99.000000', '1.000000'],
      [two.body.id, fx.org.id, bob, 'bob', 'confirmed', null, '49.500000', '0.500000'],
      [three.body.id, fx.org.id, alice, 'alice', 'cancelled', 'cancelled', '9.900000', '0.100000'],
    ])

    // After a roll back nothing is pending any more; the intents stay listed, cancelled.
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`)).body.state).toBe('rolled_back')
    const after = await app.ops('GET', `/ops/v1/vault-cycles/${cycle.cycleId}/intents`)
    expect(after.body.pending).toEqual({ intents: 0, accounts: 0, amount: '0.000000', fee: '0.000000', shares: '0.000000' })
    expect(after.body.intents.map((intent: any) => intent.reason)).toEqual(['rollback', 'rollback', 'cancelled'])
    expect((await intentRows(app, cycle.cycleId)).map((row) => row.state)).toEqual(['cancelled', 'cancelled', 'cancelled'])
  }, 30_000)

  test('an unknown cycle is not_found; the route needs the operator token and is in the OpenAPI document', async () => {
    const missing = await app.ops('GET', '/ops/v1/vault-cycles/cyc_nope/intents')
    expect(missing.status).toBe(404)
    expect(missing.body.error.code).toBe('not_found')
    const cycle = await openCycleOf(app, 'listed', 'redeem')
    const anonymous = await app.kassa.app.handle(new Request(`http://localhost/ops/v1/vault-cycles/${cycle.cycleId}/intents`))
    expect(anonymous.status).toBe(401)
    const openapi = (await (await app.kassa.app.handle(new Request('http://localhost/openapi.json'))).json()) as any
    expect(Object.keys(openapi.paths)).toContain('/ops/v1/vault-cycles/{id}/intents')
  }, 30_000)
})

describe('operator writes on vaults and cycles honour Idempotency-Key', () => {
  const post = (path: string, key: string) =>
    app.kassa.app.handle(new Request(`http://localhost${path}`, { method: 'POST', headers: { authorization: `Bearer ${app.kassa.runtime.operatorToken}`, 'idempotency-key': key } }))

  test('a retried pause answers the first answer again and sends no second event; a retried roll back replays too', async () => {
    await createVault(app, 'keyed')
    const pausedBefore = (await eventsOf(app, 'vault.paused')).length
    const first = await post('/ops/v1/vaults/keyed/pause', 'pause-keyed-1')
    expect(first.status).toBe(200)
    expect(((await first.json()) as any).state).toBe('paused')
    expect((await app.ops('POST', '/ops/v1/vaults/keyed/unpause')).body.state).toBe('active')
    const again = await post('/ops/v1/vaults/keyed/pause', 'pause-keyed-1')
    expect(again.status).toBe(200)
    expect(again.headers.get('idempotent-replayed')).toBe('true')
    expect(((await again.json()) as any).state).toBe('paused')
    // The replay changed nothing: the vault stays active, one vault.paused was sent.
    expect((await app.ops('GET', '/ops/v1/vaults')).body.vaults.find((vault: any) => vault.vaultId === 'keyed').state).toBe('active')
    expect((await eventsOf(app, 'vault.paused')).length).toBe(pausedBefore + 1)

    const cycle = await openCycleOf(app, 'keyed', 'deposit')
    const rolled = await post(`/ops/v1/vault-cycles/${cycle.cycleId}/rollback`, 'rollback-keyed-1')
    expect(((await rolled.json()) as any).state).toBe('rolled_back')
    const replayed = await post(`/ops/v1/vault-cycles/${cycle.cycleId}/rollback`, 'rollback-keyed-1')
    expect(replayed.headers.get('idempotent-replayed')).toBe('true')
    expect(((await replayed.json()) as any).state).toBe('rolled_back')
  }, 30_000)
})

describe('an operator reads a vault\'s price', () => {
  test('under /ops/v1, the same view as the public read, without the public rate limit', async () => {
    const publicRead = await app.kassa.app.handle(new Request('http://localhost/v1/vaults/listed/price'))
    expect(publicRead.status).toBe(200)
    const expected = (await publicRead.json()) as any
    for (let index = 0; index < 40; index++) {
      const read = await app.ops('GET', '/ops/v1/vaults/listed/price')
      expect(read.status).toBe(200)
      expect(read.body).toEqual(expected)
    }
    expect((await app.ops('GET', '/ops/v1/vaults/nope/price')).status).toBe(404)
  }, 30_000)
})
