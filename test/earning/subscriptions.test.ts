import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { createVault, eventsOf, intentRows, openCycleOf, sharesOf } from './support.ts'

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
  await createVault(app, 'core', { subscriptionFeeBps: 100, dailyRate: '0.0001' })
}, 60_000)
afterAll(async () => {
  await app.close()
}, 30_000)

const subscribe = (accountId: string, amount: string, vaultId = 'core') => fx.call('POST', '/v1/subscriptions', { accountId, vaultId, amount })

describe('the vault catalog', () => {
  test('lists vaults with their terms and reads one and its price without a key', async () => {
    const list = await app.call('GET', '/v1/vaults')
    expect(list.status).toBe(200)
    expect(list.body.vaults.map((vault: any) => vault.vaultId)).toContain('core')
    const one = await app.call('GET', '/v1/vaults/core')
    expect(one.body).toMatchObject({ vaultId: 'core', asset: 'USDC', state: 'active', terms: { minSubscription: '1.000000', subscriptionFeeBps: 100, payoutMode: 'direct' } })
    const price = await app.call('GET', '/v1/vaults/core/price')
    expect(price.status).toBe(200)
    expect(price.body).toMatchObject({ vaultId: 'core', sharePrice: '1.000000', normalizedPrice: '1.000000', apy: null, apyWindowDays: 7, stale: false })
    expect((await app.call('GET', '/v1/vaults/nope')).status).toBe(404)
  })

  test('the price grows daily on the vaults\' clock, sends vault.price.updated, and has an apy after seven days', async () => {
    await createVault(app, 'growth', { dailyRate: '0.0001' })
    for (let day = 0; day < 8; day++) {
      expect((await app.ops('POST', '/ops/v1/vaults/clock/advance', { seconds: 86_400 })).status).toBe(200)
      await app.kassa.earning!.runOnce()
    }
    const price = await app.call('GET', '/v1/vaults/growth/price')
    // 1.0001^8, rounded down each day.
    expect(price.body.sharePrice).toBe('1.000800280056007')
    expect(price.body.apy).toBe(((1.0001 ** 7) ** (365 / 7) - 1).toFixed(6))
    const updates = (await eventsOf(app, 'vault.price.updated')).filter((event) => event.data.vaultId === 'growth')
    expect(updates.length).toBe(8)
    expect(updates.every((event) => event.orgId === null)).toBe(true)
    // The organization's event log shows the platform-wide event.
    const log = await fx.call('GET', '/v1/events?types=vault.price.updated&limit=200')
    expect(log.body.events.some((event: any) => event.data.vaultId === 'growth')).toBe(true)
  })
})

describe('subscriptions and deposit cycles', () => {
  test('a subscription takes the amount from available at once, withholds the fee and waits in inFlight', async () => {
    const response = await subscribe(alice, '100')
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({ accountId: alice, vaultId: 'core', state: 'confirmed', amount: '99.000000', fee: '1.000000', shares: null, reason: null })
    expect(response.body.id).toMatch(/^txi_/)
    expect(await fx.balance(alice)).toMatchObject({ available: '900.000000', inFlight: '99.000000', total: '999.000000', allocations: [] })
    const [event] = (await eventsOf(app, 'transaction.deposit.confirmed')).filter((row) => row.data.intentId === response.body.id)
    expect(event!.data).toMatchObject({ accountId: alice, externalId: 'alice', vaultId: 'core', recordId: response.body.recordId, amount: '99.000000', fee: '1.000000', settlementCycle: response.body.settlementCycle })
    expect(typeof event!.data.digest).toBe('string')
    await expectVerified(app)
  })

  test('refuses bad input naming the field and changes nothing', async () => {
    await expectRefusedWithoutChange(app, () => subscribe(alice, '0.5'), 422, 'min_amount')
    await expectRefusedWithoutChange(app, () => subscribe(alice, '5000'), 422, 'insufficient_available')
    const missing = await expectRefusedWithoutChange(app, () => subscribe(alice, '10', 'nope'), 404, 'not_found')
    expect(missing.body.error.field).toBe('vaultId')
    const bad = await expectRefusedWithoutChange(app, () => subscribe(alice, '1.0000001'), 400, 'invalid_request')
    expect(bad.body.error.field).toBe('amount')
  })

  test('cancel by recordId gives back the net amount and keeps the fee; a second cancel is conflict', async () => {
    const created = (await subscribe(bob, '50')).body
    expect(await fx.balance(bob)).toMatchObject({ available: '950.000000', inFlight: '49.500000' })
    const cancelled = await fx.call('POST', '/v1/subscriptions/cancel', { recordId: created.recordId })
    expect(cancelled.status).toBe(200)
    expect(cancelled.body).toMatchObject({ state: 'cancelled', reason: 'cancelled', amount: '49.500000', fee: '0.500000' })
    expect(await fx.balance(bob)).toMatchObject({ available: '999.500000', inFlight: '0.000000', total: '999.500000' })
    const [event] = (await eventsOf(app, 'transaction.deposit.cancelled')).filter((row) => row.data.intentId === created.id)
    expect(event!.data).toMatchObject({ reason: 'cancelled', amount: '49.500000', fee: '0.500000', recordId: created.recordId })
    const again = await expectRefusedWithoutChange(app, () => fx.call('POST', '/v1/subscriptions/cancel', { recordId: created.recordId }), 409, 'conflict')
    expect(again.body.error.field).toBe('recordId')
    await expectRefusedWithoutChange(app, () => fx.call('POST', '/v1/subscriptions/cancel', { recordId: 'rec_unknown' }), 404, 'not_found')
    await expectVerified(app)
  })

  test('settling the deposit cycle credits shares at one price; settling again changes nothing', async () => {
    const cycle = await openCycleOf(app, 'core', 'deposit')
    const second = (await subscribe(alice, '10.1')).body
    const settled = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
    expect(settled.status).toBe(200)
    const price = settled.body.sharePrice
    expect(settled.body).toMatchObject({ state: 'settled', totalAmount: '108.999000', intents: 2 })
    // Alice's 99 + 9.999 net at the cycle price, each rounded down.
    const priceMicro = BigInt(price.replace('.', '').padEnd(19, '0').slice(0, 19))
    const expectShares = (net: bigint) => (net * 10n ** 18n) / priceMicro
    const minted = expectShares(99_000_000n) + expectShares(9_999_000n)
    expect(settled.body.totalShares).toBe((Number(minted) / 1e6).toFixed(6))
    expect(sharesOf(app, fx.org.id, alice, 'core').available).toBe((Number(minted) / 1e6).toFixed(6))
    const balance = await fx.balance(alice)
    expect(balance.inFlight).toBe('0.000000')
    expect(balance.allocations).toHaveLength(1)
    expect(balance.allocations[0]).toMatchObject({ vaultId: 'core', shares: settled.body.totalShares })
    // total = available + held + inFlight + sum(allocations.value)
    const micro = (value: string) => BigInt(value.replace('.', ''))
    expect(micro(balance.total)).toBe(micro(balance.available) + micro(balance.held) + micro(balance.inFlight) + micro(balance.allocations[0]!.value))
    const rows = await intentRows(app, cycle.cycleId)
    expect(rows.filter((row) => row.state === 'settled').map((row) => row.id)).toContain(second.id)
    const perIntent = (await eventsOf(app, 'transaction.deposit.settled')).filter((row) => row.data.settlementCycle === cycle.settlementCycle && row.data.vaultId === 'core')
    expect(perIntent).toHaveLength(2)
    const [cycleEvent] = (await eventsOf(app, 'vault.cycle.settled')).filter((row) => row.data.cycleId === cycle.cycleId)
    expect(cycleEvent).toMatchObject({ orgId: null, data: { cycleKind: 'deposit', totalAmount: '108.999000', mintedShares: settled.body.totalShares } })
    const closed = (await eventsOf(app, 'vault.cycle.closed')).filter((row) => row.data.cycleId === cycle.cycleId)
    expect(closed).toHaveLength(1)
    await expectVerified(app)
    // A second settle: same answer, nothing written.
    const before = await app.ops('GET', '/ops/v1/ledger/verify')
    const again = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
    expect(again.body).toEqual(settled.body)
    expect((await app.ops('GET', '/ops/v1/ledger/verify')).body.counts).toEqual(before.body.counts)
    expect((await eventsOf(app, 'vault.cycle.settled')).filter((row) => row.data.cycleId === cycle.cycleId)).toHaveLength(1)
    // The next cycle is open and takes new intents; the settled one cannot be cancelled from.
    const next = await openCycleOf(app, 'core', 'deposit')
    expect(next.settlementCycle).toBe(cycle.settlementCycle + 1)
    await expectRefusedWithoutChange(app, () => fx.call('POST', '/v1/subscriptions/cancel', { recordId: second.recordId }), 409, 'conflict')
  })

  test('a closed cycle takes no cancel; a rollback gives every intent back exactly, fee included, and twice changes nothing', async () => {
    const cycle = await openCycleOf(app, 'core', 'deposit')
    const before = await fx.balance(bob)
    const first = (await subscribe(bob, '20')).body
    const secondIntent = (await subscribe(bob, '30')).body
    const closed = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/close`)
    expect(closed.body).toMatchObject({ state: 'closed', totalAmount: '49.500000', intents: 2 })
    await expectRefusedWithoutChange(app, () => fx.call('POST', '/v1/subscriptions/cancel', { recordId: first.recordId }), 409, 'conflict')
    // New subscriptions go to the next cycle.
    const later = (await subscribe(alice, '5')).body
    expect(later.settlementCycle).toBe(cycle.settlementCycle + 1)
    const rolled = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`)
    expect(rolled.body).toMatchObject({ state: 'rolled_back', totalAmount: '50.000000', intents: 2 })
    expect(await fx.balance(bob)).toEqual(before)
    const rows = await intentRows(app, cycle.cycleId)
    expect(rows.map((row) => [row.state, row.reason])).toEqual([
      ['cancelled', 'rollback'],
      ['cancelled', 'rollback'],
    ])
    const cancelled = (await eventsOf(app, 'transaction.deposit.cancelled')).filter((row) => [first.id, secondIntent.id].includes(row.data.intentId))
    expect(cancelled.map((row) => [row.data.reason, row.data.amount])).toEqual([
      ['rollback', '20.000000'],
      ['rollback', '30.000000'],
    ])
    expect((await eventsOf(app, 'vault.cycle.rolled_back')).filter((row) => row.data.cycleId === cycle.cycleId)).toHaveLength(1)
    const again = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`)
    expect(again.body).toEqual(rolled.body)
    expect(await fx.balance(bob)).toEqual(before)
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)).status).toBe(409)
    await expectVerified(app)
  })

  test('an open cycle can be rolled back too', async () => {
    const cycle = await openCycleOf(app, 'core', 'deposit')
    const before = await fx.balance(alice)
    expect(before.inFlight).toBe('4.950000')
    const rolled = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`)
    expect(rolled.body.state).toBe('rolled_back')
    expect(await fx.balance(alice)).toMatchObject({ inFlight: '0.000000', available: (Number(before.available) + 5).toFixed(6) })
    await expectVerified(app)
  })

  test('a paused vault refuses subscriptions (conflict naming vaultId) and sends vault.paused / vault.unpaused', async () => {
    const paused = await app.ops('POST', '/ops/v1/vaults/core/pause')
    expect(paused.body.state).toBe('paused')
    const refused = await expectRefusedWithoutChange(app, () => subscribe(alice, '10'), 409, 'conflict')
    expect(refused.body.error.field).toBe('vaultId')
    expect((await app.ops('POST', '/ops/v1/vaults/core/unpause')).body.state).toBe('active')
    expect((await subscribe(alice, '10')).status).toBe(201)
    expect((await eventsOf(app, 'vault.paused')).map((row) => row.data)).toEqual([{ vaultId: 'core' }])
    // Platform-wide: another organization's event log has it too.
    const other = await app.createOrg('Other')
    const log = await app.call('GET', '/v1/events?types=vault.paused', { key: other.testKey })
    expect(log.body.events.map((event: any) => [event.type, event.data.vaultId])).toEqual([['vault.paused', 'core']])
    expect((await eventsOf(app, 'vault.unpaused')).map((row) => row.data)).toEqual([{ vaultId: 'core' }])
  })

  test('a price older than the vault\'s limit answers stale_price until the venue is synced again', async () => {
    await createVault(app, 'slow', { priceMaxAgeSeconds: 3600 })
    await app.ops('POST', '/ops/v1/vaults/clock/advance', { seconds: 7200 })
    expect((await app.call('GET', '/v1/vaults/slow/price')).body.stale).toBe(true)
    const refused = await expectRefusedWithoutChange(app, () => subscribe(alice, '10', 'slow'), 422, 'stale_price')
    expect(refused.body.error.field).toBe('vaultId')
    await app.kassa.earning!.runOnce()
    expect((await subscribe(alice, '10', 'slow')).status).toBe(201)
  })

  test('a replayed Idempotency-Key answers the first subscription and subscribes once', async () => {
    const headers = { 'idempotency-key': 'sub-once' }
    const first = await app.call('POST', '/v1/subscriptions', { key: fx.org.testKey, body: { accountId: bob, vaultId: 'core', amount: '7' }, headers })
    const second = await app.call('POST', '/v1/subscriptions', { key: fx.org.testKey, body: { accountId: bob, vaultId: 'core', amount: '7' }, headers })
    expect(second.body).toEqual(first.body)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    const mine = (await eventsOf(app, 'transaction.deposit.confirmed')).filter((row) => row.data.intentId === first.body.id)
    expect(mine).toHaveLength(1)
  })

  test('cycles on a cadence close and settle in the worker\'s step', async () => {
    await createVault(app, 'daily', { depositCycleSeconds: 86_400 })
    const cycle = await openCycleOf(app, 'daily', 'deposit')
    await subscribe(alice, '10', 'daily')
    expect(await app.kassa.earning!.runOnce()).toBe(0)
    await app.ops('POST', '/ops/v1/vaults/clock/advance', { seconds: 86_400 })
    await app.kassa.earning!.runOnce()
    const cycles = (await app.ops('GET', '/ops/v1/vaults/daily/cycles')).body.cycles
    expect(cycles.find((row: any) => row.cycleId === cycle.cycleId).state).toBe('settled')
    expect(sharesOf(app, fx.org.id, alice, 'daily').available).toBe('10.000000')
    await expectVerified(app)
  })
})
