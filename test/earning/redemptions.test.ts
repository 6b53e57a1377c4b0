import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { createVault, eventsOf, intentRows, openCycleOf, sharesOf } from './support.ts'

let app: TestApp
let fx: LedgerFixture
let alice: string
let bob: string

/** Subscribes and settles the deposit cycle, so the account holds shares (price 1 unless set). */
async function holdShares(vaultId: string, accountId: string, amount: string): Promise<void> {
  expect((await fx.call('POST', '/v1/subscriptions', { accountId, vaultId, amount })).status).toBe(201)
  const cycle = await openCycleOf(app, vaultId, 'deposit')
  expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)).body.state).toBe('settled')
}

const redeem = (accountId: string, vaultId: string, shares: string) => fx.call('POST', '/v1/redemptions', { accountId, vaultId, mode: 'queued', shares })

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app)
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  await fx.fund(alice, '1000')
  await fx.fund(bob, '1000')
  await createVault(app, 'direct')
  await createVault(app, 'claim', { payoutMode: 'claimable' })
  await holdShares('direct', alice, '100')
  await holdShares('claim', bob, '100')
}, 60_000)
afterAll(async () => {
  await app.close()
}, 30_000)

describe('queued redemptions', () => {
  test('locks the shares, keeps them in allocations and estimates proceeds on a direct vault', async () => {
    const response = await redeem(alice, 'direct', '10')
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({ mode: 'queued', state: 'confirmed', shares: '10.000000', amount: null, payout: null })
    expect(sharesOf(app, fx.org.id, alice, 'direct')).toEqual({ available: '90.000000', held: '10.000000' })
    const balance = await fx.balance(alice)
    expect(balance.allocations).toEqual([{ vaultId: 'direct', shares: '100.000000', value: '100.000000' }])
    expect(balance.total).toBe('1000.000000')
    const [event] = (await eventsOf(app, 'transaction.redeem.confirmed')).filter((row) => row.data.intentId === response.body.id)
    expect(event!.data).toMatchObject({ shares: '10.000000', estimatedProceeds: '10.000000', externalId: 'alice', vaultId: 'direct' })
    await expectVerified(app)
  })

  test('refuses more shares than free, less than the minimum, and a paused vault, changing nothing', async () => {
    const tooMany = await expectRefusedWithoutChange(app, () => redeem(alice, 'direct', '91'), 422, 'insufficient_available')
    expect(tooMany.body.error.field).toBe('shares')
    const small = await expectRefusedWithoutChange(app, () => redeem(alice, 'direct', '0.1'), 422, 'min_amount')
    expect(small.body.error.field).toBe('shares')
    await app.ops('POST', '/ops/v1/vaults/direct/pause')
    const paused = await expectRefusedWithoutChange(app, () => redeem(alice, 'direct', '1'), 409, 'conflict')
    expect(paused.body.error.field).toBe('vaultId')
    await app.ops('POST', '/ops/v1/vaults/direct/unpause')
    const instant = await expectRefusedWithoutChange(app, () => fx.call('POST', '/v1/redemptions', { accountId: alice, vaultId: 'direct', mode: 'queued' }), 400, 'invalid_request')
    expect(instant.body.error.field).toBe('shares')
  })

  test('settling pays one aggregated amount per account, split by locked shares so the parts sum to walletTotal', async () => {
    await app.ops('POST', '/ops/v1/vaults/direct/nav', { price: '1.1' })
    const two = (await redeem(alice, 'direct', '20.000001')).body
    const three = (await redeem(alice, 'direct', '0.7')).body
    const cycle = await openCycleOf(app, 'direct', 'redeem')
    const availableBefore = (await fx.balance(alice)).available
    const settled = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
    expect(settled.body).toMatchObject({ state: 'settled', sharePrice: '1.100000', totalShares: '30.700001', intents: 3 })
    // 30.700001 shares at 1.1 = 33.7700011, rounded down.
    const walletTotal = '33.770001'
    expect(settled.body.totalAmount).toBe(walletTotal)
    const events = (await eventsOf(app, 'transaction.redeem.settled')).filter((row) => row.data.settlementCycle === cycle.settlementCycle && row.data.vaultId === 'direct')
    expect(events).toHaveLength(3)
    const micro = (value: string) => BigInt(value.replace('.', ''))
    expect(events.every((row) => row.data.walletTotal === walletTotal)).toBe(true)
    expect(events.reduce((sum, row) => sum + micro(row.data.amount), 0n)).toBe(micro(walletTotal))
    const byIntent = Object.fromEntries(events.map((row) => [row.data.intentId, row.data.amount]))
    // The 0.7-share part is rounded down; the largest part (20.000001 shares) takes the remainder.
    expect(byIntent[three.id]).toBe('0.769999')
    expect(micro(byIntent[two.id])).toBe((micro(walletTotal) * 20_000_001n) / 30_700_001n + (micro(walletTotal) - [10_000_000n, 20_000_001n, 700_000n].reduce((sum, shares) => sum + (micro(walletTotal) * shares) / 30_700_001n, 0n)))
    expect(micro((await fx.balance(alice)).available) - micro(availableBefore)).toBe(micro(walletTotal))
    expect(sharesOf(app, fx.org.id, alice, 'direct')).toEqual({ available: '69.299999', held: '0.000000' })
    const [cycleEvent] = (await eventsOf(app, 'vault.cycle.settled')).filter((row) => row.data.cycleId === cycle.cycleId)
    expect(cycleEvent!.data).toMatchObject({ cycleKind: 'redeem', totalShares: '30.700001', netProceeds: walletTotal, fee: '0.000000' })
    const read = await fx.call('GET', `/v1/redemptions/${two.id}`)
    expect(read.body).toMatchObject({ state: 'settled', payout: 'direct', amount: byIntent[two.id] })
    await expectVerified(app)
  })

  test('a rolled-back redeem cycle unlocks every share exactly', async () => {
    const before = sharesOf(app, fx.org.id, alice, 'direct')
    await redeem(alice, 'direct', '5')
    await redeem(alice, 'direct', '6')
    expect(sharesOf(app, fx.org.id, alice, 'direct').held).toBe('11.000000')
    const cycle = await openCycleOf(app, 'direct', 'redeem')
    const rolled = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`)
    expect(rolled.body).toMatchObject({ state: 'rolled_back', totalShares: '11.000000' })
    expect(sharesOf(app, fx.org.id, alice, 'direct')).toEqual(before)
    expect((await intentRows(app, cycle.cycleId)).map((row) => row.reason)).toEqual(['rollback', 'rollback'])
    await expectVerified(app)
  })
})

describe('claimable proceeds', () => {
  test('settle into inFlight, then a claim moves them to available once, also while paused', async () => {
    await redeem(bob, 'claim', '40')
    const cycle = await openCycleOf(app, 'claim', 'redeem')
    await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
    const [settled] = (await eventsOf(app, 'transaction.redeem.settled')).filter((row) => row.data.vaultId === 'claim')
    expect(settled!.data).toMatchObject({ claimable: '40.000000', walletTotal: '40.000000' })
    expect(settled!.data.amount).toBeUndefined()
    expect(await fx.balance(bob)).toMatchObject({ available: '900.000000', inFlight: '40.000000', total: '1000.000000' })
    await app.ops('POST', '/ops/v1/vaults/claim/pause')
    const claimed = await fx.call('POST', '/v1/claims', { accountId: bob, vaultId: 'claim' })
    expect(claimed.status).toBe(200)
    expect(claimed.body).toMatchObject({ accountId: bob, vaultId: 'claim', amount: '40.000000' })
    expect(await fx.balance(bob)).toMatchObject({ available: '940.000000', inFlight: '0.000000', total: '1000.000000' })
    const [event] = (await eventsOf(app, 'transaction.claim.confirmed'))
    expect(event!.data).toMatchObject({ amount: '40.000000', digest: claimed.body.digest, accountId: bob })
    const again = await expectRefusedWithoutChange(app, () => fx.call('POST', '/v1/claims', { accountId: bob, vaultId: 'claim' }), 404, 'not_found')
    expect(again.body.error.field).toBe('vaultId')
    await expectVerified(app)
  })
})

describe('instant redemptions', () => {
  const quote = (accountId: string, vaultId: string, shares: string) => fx.call('POST', '/v1/quotes', { kind: 'instant_redeem', accountId, vaultId, shares })
  const instant = (accountId: string, vaultId: string, quoteId?: string) => fx.call('POST', '/v1/redemptions', { accountId, vaultId, mode: 'instant', ...(quoteId ? { quoteId } : {}) })

  test('execute once at an instant_redeem quote that itemizes the fee, from the vault\'s buffer', async () => {
    await createVault(app, 'fast', { instantRedemptionFeeBps: 50, instantBuffer: '100' })
    await holdShares('fast', alice, '200')
    const quoted = await quote(alice, 'fast', '80')
    expect(quoted.status).toBe(201)
    // 80 shares at 1: 80, fee 0.5 % = 0.4, 79.6 reaches available.
    expect(quoted.body).toMatchObject({ kind: 'instant_redeem', vaultId: 'fast', shares: '80.000000', totalDebited: '80.000000', fees: { network: '0.000000', service: '0.400000' }, amount: '79.600000', state: 'open' })
    const before = await fx.balance(alice)
    const executed = await instant(alice, 'fast', quoted.body.id)
    expect(executed.status).toBe(201)
    expect(executed.body).toMatchObject({ mode: 'instant', state: 'settled', shares: '80.000000', amount: '79.600000', fee: '0.400000', quoteId: quoted.body.id, settlementCycle: null })
    const micro = (value: string) => BigInt(value.replace('.', ''))
    expect(micro((await fx.balance(alice)).available) - micro(before.available)).toBe(79_600_000n)
    expect(sharesOf(app, fx.org.id, alice, 'fast')).toEqual({ available: '120.000000', held: '0.000000' })
    expect((await app.call('GET', '/v1/vaults/fast')).body.instantBuffer).toBe('20.000000')
    const [settled] = (await eventsOf(app, 'transaction.redeem.settled')).filter((row) => row.data.intentId === executed.body.id)
    expect(settled!.data).toMatchObject({ mode: 'instant', amount: '79.600000', fee: '0.400000' })
    const twice = await expectRefusedWithoutChange(app, () => instant(alice, 'fast', quoted.body.id), 409, 'quote_consumed')
    expect(twice.body.error.field).toBe('quoteId')
    await expectVerified(app)
  })

  test('no fee without a quote, and a buffer that cannot cover it is refused with limit_exceeded', async () => {
    const noQuote = await expectRefusedWithoutChange(app, () => instant(alice, 'fast'), 400, 'invalid_request')
    expect(noQuote.body.error.field).toBe('quoteId')
    const tooBig = await expectRefusedWithoutChange(app, () => quote(alice, 'fast', '50'), 422, 'limit_exceeded')
    expect(tooBig.body.error.field).toBe('shares')
    // A quote made while the buffer covered it is refused at execution once the buffer has shrunk.
    const quoted = (await quote(alice, 'fast', '15')).body
    await app.ops('PATCH', '/ops/v1/vaults/fast', { instantBuffer: '10' })
    await expectRefusedWithoutChange(app, () => instant(alice, 'fast', quoted.id), 422, 'limit_exceeded')
    expect((await fx.call('GET', `/v1/quotes/${quoted.id}`)).body.state).toBe('open')
    const withdrawal = await fx.call('POST', '/v1/withdrawals', { accountId: alice, quoteId: quoted.id, allowlistEntryId: 'alw_x' })
    expect(withdrawal.status).toBeGreaterThanOrEqual(400)
    await expectVerified(app)
  })
})
