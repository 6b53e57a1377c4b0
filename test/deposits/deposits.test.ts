import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { createApp, type Kassa } from '../../server/app.ts'
import { configForTests } from '../support/config.ts'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import { parseAddress } from '../../server/modules/chain/addresses.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { eventsOf, expectRefusedWithoutAnyChange, systemBalance, txHash } from './support.ts'

/**
 * The wall clock is pinned, so an organization's clock moves only when a test advances it: "in
 * flight until finality" is then a fact, not a race against Sui's half-second checkpoints.
 */
const WALL_CLOCK_MS = Date.UTC(2030, 0, 1)

let app: TestApp
let fx: LedgerFixture
let alice: string
let bob: string

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => WALL_CLOCK_MS })
  fx = await ledgerFixture(app, 'Deposits Org')
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
})
afterAll(async () => {
  await app.close()
})

const arrive = (body: { network: string; asset: string; address: string; amount: string; txHash: string }) => fx.call('POST', '/v1/sandbox/chain/arrivals', body)
const advance = async (seconds: number) => expect((await fx.call('POST', '/v1/sandbox/clock/advance', { seconds })).status).toBe(200)
const addressOf = async (accountId: string, asset: 'USDC' | 'USDT') => {
  const response = await fx.call('POST', `/v1/accounts/${accountId}/deposit-addresses`, { asset })
  expect([200, 201]).toContain(response.status)
  return response.body as { id: string; address: string; network: 'sui' | 'tron'; state: string }
}
const suiArrival = (address: string, amount: string) => ({ network: 'sui', asset: 'USDC', address, amount, txHash: txHash('sui') })
const tronArrival = (address: string, amount: string) => ({ network: 'tron', asset: 'USDT', address, amount, txHash: txHash('tron') })

describe('deposit addresses', () => {
  test('are created once per (account, asset, network): 201, then 200 with the same address', async () => {
    const account = await fx.mint('address-owner')
    const first = await fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDC', network: 'sui' })
    expect(first.status).toBe(201)
    expect(first.body).toMatchObject({ accountId: account, asset: 'USDC', network: 'sui', state: 'active', retiredAt: null })
    expect(first.body.id).toMatch(/^addr_[0-9a-f]{32}$/)
    const again = await fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDC' })
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    const tron = await fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDT', network: 'tron' })
    expect(tron.status).toBe(201)
    const list = await fx.call('GET', `/v1/accounts/${account}/deposit-addresses`)
    expect(list.body).toEqual({ depositAddresses: [first.body, tron.body], hasMore: false })
  })

  test('are real addresses of their network, derived deterministically from the configured seed', async () => {
    const account = await fx.mint('derived')
    for (const asset of ['USDC', 'USDT'] as const) {
      const created = await addressOf(account, asset)
      expect(parseAddress(created.network, created.address)).toBe(created.address)
      expect(created.address).toBe(app.kassa.runtime.addresses.depositAddress({ orgId: fx.org.id, accountId: account, asset, network: created.network, index: 0 }))
    }
  })

  test('concurrent creates agree on one address', async () => {
    const account = await fx.mint('concurrent-address')
    const answers = await Promise.all(Array.from({ length: 6 }, () => fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDT' })))
    expect(new Set(answers.map((answer) => answer.body.address)).size).toBe(1)
    expect(answers.filter((answer) => answer.status === 201)).toHaveLength(1)
  })

  const refusals: Array<{ name: string; body: Record<string, unknown>; status: number; code: string; field?: string }> = [
    { name: 'an asset on another network', body: { asset: 'USDT', network: 'sui' }, status: 422, code: 'unsupported_asset', field: 'network' },
    { name: 'an unknown network', body: { asset: 'USDC', network: 'solana' }, status: 400, code: 'invalid_request', field: 'network' },
    { name: 'an unsupported asset', body: { asset: 'EUR' }, status: 422, code: 'unsupported_asset', field: 'asset' },
    { name: 'an unknown field', body: { asset: 'USDC', memo: 'x' }, status: 400, code: 'invalid_request' },
  ]
  for (const refusal of refusals) {
    test(`refuses ${refusal.name} and creates nothing`, async () => {
      await expectRefusedWithoutAnyChange(app, () => fx.call('POST', `/v1/accounts/${bob}/deposit-addresses`, refusal.body), refusal.status, refusal.code, refusal.field)
    })
  }

  test("refuses another organization's account as not found and creates nothing", async () => {
    const other = await ledgerFixture(app, 'Other Org')
    const stranger = await other.mint('stranger')
    await expectRefusedWithoutAnyChange(app, () => fx.call('POST', `/v1/accounts/${stranger}/deposit-addresses`, { asset: 'USDC' }), 404, 'not_found')
  })

  test('a retired address is replaced by a new one and still credits its account', async () => {
    const account = await fx.mint('retiree')
    const old = await addressOf(account, 'USDC')
    const retired = await fx.call('POST', `/v1/accounts/${account}/deposit-addresses/${old.id}/retire`)
    expect(retired.status).toBe(200)
    expect(retired.body).toMatchObject({ id: old.id, state: 'retired' })
    expect((await fx.call('POST', `/v1/accounts/${account}/deposit-addresses/${old.id}/retire`)).body).toEqual(retired.body)
    const replacement = await fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDC' })
    expect(replacement.status).toBe(201)
    expect(replacement.body.address).not.toBe(old.address)
    expect(replacement.body.address).toBe(app.kassa.runtime.addresses.depositAddress({ orgId: fx.org.id, accountId: account, asset: 'USDC', network: 'sui', index: 1 }))

    const arrival = await arrive(suiArrival(old.address, '12.5'))
    expect(arrival.status).toBe(201)
    expect(arrival.body).toMatchObject({ disposition: 'deposit', accountId: account, state: 'confirming' })
    expect(await fx.balance(account)).toMatchObject({ inFlight: '12.500000', available: '0.000000' })
    await advance(1)
    expect(await fx.balance(account)).toMatchObject({ inFlight: '0.000000', available: '12.500000', total: '12.500000' })
    const deposit = await fx.call('GET', `/v1/deposits/${arrival.body.depositId}`)
    expect(deposit.body).toMatchObject({ source: 'deposit_address', state: 'completed', depositAddressId: old.id, receivedAmount: '12.500000', amountMatch: null })
    await expectVerified(app)
  })
})

describe('arrivals at deposit addresses', () => {
  test("a Sui arrival is in flight until its checkpoint is final, then available, with funding.deposit.confirmed (never the vault intents' transaction.deposit.*)", async () => {
    const { address } = await addressOf(alice, 'USDC')
    const body = suiArrival(address, '100')
    const arrival = await arrive(body)
    expect(arrival.status).toBe(201)
    expect(arrival.body).toMatchObject({ network: 'sui', asset: 'USDC', address, amount: '100.000000', txHash: body.txHash, state: 'confirming', confirmations: 0, confirmationsRequired: 1, disposition: 'deposit', accountId: alice })
    expect(arrival.body.id).toMatch(/^arr_[0-9a-f]{32}$/)
    expect(await fx.balance(alice)).toMatchObject({ total: '100.000000', available: '0.000000', inFlight: '100.000000' })
    await expectVerified(app)
    const deposit = (await fx.call('GET', `/v1/deposits/${arrival.body.depositId}`)).body
    expect(deposit).toMatchObject({ accountId: alice, source: 'deposit_address', state: 'confirming', receivedAmount: '100.000000', txHash: body.txHash, fundingInstructions: null, intentId: null })

    await advance(1)
    expect(await fx.balance(alice)).toMatchObject({ total: '100.000000', available: '100.000000', inFlight: '0.000000' })
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body).toMatchObject({ state: 'completed' })
    expect((await fx.call('GET', `/v1/sandbox/chain/arrivals/${arrival.body.id}`)).body).toMatchObject({ state: 'final', confirmations: 1 })
    const events = (await eventsOf(app, 'funding.deposit.confirmed')).filter((event) => event.data.depositId === deposit.id)
    expect(events).toHaveLength(1)
    expect(await eventsOf(app, 'transaction.deposit.confirmed')).toEqual([])
    expect(events[0]!.data).toEqual({
      depositId: deposit.id,
      accountId: alice,
      externalId: 'alice',
      asset: 'USDC',
      network: 'sui',
      amount: '100.000000',
      digest: body.txHash,
      source: 'deposit_address',
      amountMatch: null,
    })
    await expectVerified(app)
  })

  test('a Tron arrival needs 19 blocks of 3 s: in flight at 56 s, available at 57 s', async () => {
    const { address } = await addressOf(alice, 'USDT')
    const arrival = await arrive(tronArrival(address, '40'))
    expect(arrival.body).toMatchObject({ confirmationsRequired: 19, state: 'confirming' })
    await advance(56)
    expect((await fx.call('GET', `/v1/sandbox/chain/arrivals/${arrival.body.id}`)).body).toMatchObject({ state: 'confirming', confirmations: 18 })
    expect(await fx.balance(alice, 'USDT')).toMatchObject({ available: '0.000000', inFlight: '40.000000' })
    await expectVerified(app)
    await advance(1)
    expect(await fx.balance(alice, 'USDT')).toMatchObject({ available: '40.000000', inFlight: '0.000000', total: '40.000000' })
    await expectVerified(app)
  })

  test('the same arrival observed twice is credited once, before and after finality', async () => {
    const account = await fx.mint('duplicate')
    const { address } = await addressOf(account, 'USDC')
    const body = suiArrival(address, '7')
    const first = await arrive(body)
    expect(first.status).toBe(201)
    const second = await arrive(body)
    expect(second.status).toBe(200)
    expect(second.body).toEqual(first.body)
    expect(await fx.balance(account)).toMatchObject({ inFlight: '7.000000', total: '7.000000' })
    await advance(1)
    const third = await arrive(body)
    expect(third.status).toBe(200)
    expect(third.body.id).toBe(first.body.id)
    expect(await fx.balance(account)).toMatchObject({ available: '7.000000', inFlight: '0.000000', total: '7.000000' })
    const deposits = await fx.call('GET', `/v1/deposits?accountId=${account}`)
    expect(deposits.body.deposits).toHaveLength(1)
    await expectVerified(app)
  })

  test('the same arrival posted concurrently is credited once', async () => {
    const account = await fx.mint('duplicate-concurrent')
    const { address } = await addressOf(account, 'USDT')
    const body = tronArrival(address, '3')
    const answers = await Promise.all(Array.from({ length: 8 }, () => arrive(body)))
    expect(answers.map((answer) => answer.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 201])
    expect(new Set(answers.map((answer) => answer.body.id)).size).toBe(1)
    expect(await fx.balance(account, 'USDT')).toMatchObject({ inFlight: '3.000000', total: '3.000000' })
    await expectVerified(app)
  })

  test('the same transaction and address with different contents is a conflict and changes nothing', async () => {
    const { address } = await addressOf(bob, 'USDC')
    const body = suiArrival(address, '5')
    await arrive(body)
    await expectRefusedWithoutAnyChange(app, () => arrive({ ...body, amount: '6' }), 409, 'conflict', 'txHash')
  })

  const refusals: Array<{ name: string; body: Record<string, unknown>; status: number; code: string; field?: string }> = [
    { name: 'a Sui short-form address', body: { address: '0x2' }, status: 400, code: 'invalid_request', field: 'address' },
    { name: 'a Tron address on Sui', body: { address: 'TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZY' }, status: 400, code: 'invalid_request', field: 'address' },
    { name: 'a malformed transaction digest', body: { txHash: 'ab'.repeat(32) }, status: 400, code: 'invalid_request', field: 'txHash' },
    { name: 'too many decimals', body: { amount: '1.0000001' }, status: 400, code: 'invalid_request', field: 'amount' },
    { name: 'a zero amount', body: { amount: '0' }, status: 400, code: 'invalid_request', field: 'amount' },
    { name: 'an asset of another network', body: { asset: 'USDT' }, status: 422, code: 'unsupported_asset', field: 'network' },
    { name: 'an unknown network', body: { network: 'eth' }, status: 400, code: 'invalid_request', field: 'network' },
    { name: 'an unknown field', body: { memo: 'x' }, status: 400, code: 'invalid_request' },
  ]
  for (const refusal of refusals) {
    test(`refuses an arrival with ${refusal.name} and changes nothing`, async () => {
      const { address } = await addressOf(bob, 'USDC')
      await expectRefusedWithoutAnyChange(app, () => arrive({ ...suiArrival(address, '1'), ...refusal.body } as never), refusal.status, refusal.code, refusal.field)
    })
  }

  test('a Tron arrival at an address with one changed character is refused and changes nothing', async () => {
    const { address } = await addressOf(bob, 'USDT')
    const changed = address.slice(0, 10) + (address[10] === 'a' ? 'b' : 'a') + address.slice(11)
    await expectRefusedWithoutAnyChange(app, () => arrive(tronArrival(changed, '1')), 400, 'invalid_request', 'address')
  })

  test('only test keys drive the simulator', async () => {
    const { address } = await addressOf(bob, 'USDC')
    await expectRefusedWithoutAnyChange(app, () => app.call('POST', '/v1/sandbox/chain/arrivals', { key: fx.org.publishableKey, body: suiArrival(address, '1') }), 403, 'permission_denied')
  })
})

describe('declared deposits', () => {
  const declare = (body: Record<string, unknown>) => fx.call('POST', '/v1/deposits', body)

  test('answer funding instructions naming the account deposit address, amount and expiry', async () => {
    const response = await declare({ accountId: alice, asset: 'USDC', network: 'sui', amount: '25' })
    expect(response.status).toBe(201)
    const { address } = await addressOf(alice, 'USDC')
    expect(response.body).toMatchObject({
      accountId: alice,
      asset: 'USDC',
      network: 'sui',
      source: 'declared',
      state: 'awaiting_funds',
      expectedAmount: '25.000000',
      receivedAmount: null,
      amountMatch: null,
      address,
      fundingInstructions: { network: 'sui', asset: 'USDC', address, amount: '25.000000' },
    })
    const now = Date.parse((await fx.call('GET', '/v1/sandbox/clock')).body.now)
    expect(Date.parse(response.body.expiresAt) - now).toBe(24 * 3600 * 1000)
    expect(response.body.fundingInstructions.expiresAt).toBe(response.body.expiresAt)
    expect(response.body.id).toMatch(/^dep_[0-9a-f]{32}$/)
    expect((await fx.call('GET', `/v1/deposits/${response.body.id}`)).body).toEqual(response.body)
  })

  test('an exact arrival completes the deposit: in flight, then available, event with its txi_ intentId and digest', async () => {
    const account = await fx.mint('exact')
    const deposit = (await declare({ accountId: account, asset: 'USDT', amount: '30' })).body
    expect(deposit.intentId).toBe(`txi_${deposit.id.slice('dep_'.length)}`)
    expect(deposit.intentId).toMatch(/^txi_[0-9a-f]{32}$/)
    const body = tronArrival(deposit.fundingInstructions.address, '30')
    const arrival = await arrive(body)
    expect(arrival.body).toMatchObject({ depositId: deposit.id, accountId: account })
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body).toMatchObject({ state: 'confirming', amountMatch: 'exact', receivedAmount: '30.000000', txHash: body.txHash })
    expect(await fx.balance(account, 'USDT')).toMatchObject({ inFlight: '30.000000', available: '0.000000' })
    await expectVerified(app)
    await advance(57)
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body).toMatchObject({ state: 'completed', amountMatch: 'exact' })
    expect(await fx.balance(account, 'USDT')).toMatchObject({ inFlight: '0.000000', available: '30.000000' })
    const [event] = (await eventsOf(app, 'funding.deposit.confirmed')).filter((entry) => entry.data.depositId === deposit.id)
    expect(event!.data).toMatchObject({ intentId: deposit.intentId, accountId: account, externalId: 'exact', amount: '30.000000', digest: body.txHash, source: 'declared', amountMatch: 'exact' })
    await expectVerified(app)
  })

  test('under-delivery completes with amountMatch under and credits what was received', async () => {
    const account = await fx.mint('under')
    const deposit = (await declare({ accountId: account, asset: 'USDC', amount: '100' })).body
    await arrive(suiArrival(deposit.address, '60.25'))
    await advance(1)
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body).toMatchObject({ state: 'completed', amountMatch: 'under', expectedAmount: '100.000000', receivedAmount: '60.250000' })
    expect(await fx.balance(account)).toMatchObject({ available: '60.250000', total: '60.250000' })
    await expectVerified(app)
  })

  test('over-delivery completes with amountMatch over and credits what was received', async () => {
    const account = await fx.mint('over')
    const deposit = (await declare({ accountId: account, asset: 'USDC', amount: '10' })).body
    await arrive(suiArrival(deposit.address, '15'))
    await advance(1)
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body).toMatchObject({ state: 'completed', amountMatch: 'over', receivedAmount: '15.000000' })
    expect(await fx.balance(account)).toMatchObject({ available: '15.000000' })
    await expectVerified(app)
  })

  test('an arrival matches the open deposit of exactly its amount before an older one', async () => {
    const account = await fx.mint('matching')
    const older = (await declare({ accountId: account, asset: 'USDC', amount: '10' })).body
    const exact = (await declare({ accountId: account, asset: 'USDC', amount: '20' })).body
    const arrival = await arrive(suiArrival(exact.address, '20'))
    expect(arrival.body.depositId).toBe(exact.id)
    expect((await fx.call('GET', `/v1/deposits/${older.id}`)).body.state).toBe('awaiting_funds')
    // The next arrival, of no declared amount, takes the oldest open deposit.
    const next = await arrive(suiArrival(exact.address, '3'))
    expect(next.body.depositId).toBe(older.id)
    expect((await fx.call('GET', `/v1/deposits/${older.id}`)).body).toMatchObject({ amountMatch: 'under', receivedAmount: '3.000000' })
    // With no declared deposit left open, a third arrival is a plain deposit-address deposit.
    const third = await arrive(suiArrival(exact.address, '1'))
    expect((await fx.call('GET', `/v1/deposits/${third.body.depositId}`)).body).toMatchObject({ source: 'deposit_address', amountMatch: null })
    await advance(1)
    expect(await fx.balance(account)).toMatchObject({ available: '24.000000', inFlight: '0.000000' })
    const listed = await fx.call('GET', `/v1/deposits?accountId=${account}`)
    expect(listed.body.deposits.map((entry: { id: string }) => entry.id)).toEqual([older.id, exact.id, third.body.depositId])
    await expectVerified(app)
  })

  test('a declared deposit nothing arrived for expires after 24 h; a later arrival still credits', async () => {
    const account = await fx.mint('late')
    const deposit = (await declare({ accountId: account, asset: 'USDC', amount: '8' })).body
    await advance(24 * 3600)
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body.state).toBe('expired')
    const arrival = await arrive(suiArrival(deposit.address, '8'))
    expect(arrival.body.depositId).not.toBe(deposit.id)
    await advance(1)
    expect((await fx.call('GET', `/v1/deposits/${deposit.id}`)).body.state).toBe('expired')
    expect((await fx.call('GET', `/v1/deposits/${arrival.body.depositId}`)).body).toMatchObject({ source: 'deposit_address', state: 'completed' })
    expect(await fx.balance(account)).toMatchObject({ available: '8.000000' })
    await expectVerified(app)
  })

  const refusals: Array<{ name: string; body: Record<string, unknown>; status: number; code: string; field?: string }> = [
    { name: 'a missing amount', body: { amount: undefined }, status: 400, code: 'invalid_request', field: 'amount' },
    { name: 'a negative amount', body: { amount: '-1' }, status: 400, code: 'invalid_request', field: 'amount' },
    { name: 'a number for the amount', body: { amount: 5 }, status: 400, code: 'invalid_request', field: 'amount' },
    { name: 'an unsupported asset', body: { asset: 'DAI' }, status: 422, code: 'unsupported_asset', field: 'asset' },
    { name: 'an asset on another network', body: { network: 'tron' }, status: 422, code: 'unsupported_asset', field: 'network' },
    { name: 'an unknown account', body: { accountId: 'acct_00000000000000000000000000000000' }, status: 404, code: 'not_found', field: 'accountId' },
    { name: 'an unknown field', body: { reference: 'x' }, status: 400, code: 'invalid_request' },
  ]
  for (const refusal of refusals) {
    test(`refuses a declaration with ${refusal.name} and changes nothing`, async () => {
      await expectRefusedWithoutAnyChange(app, () => declare({ accountId: bob, asset: 'USDC', amount: '5', ...refusal.body }), refusal.status, refusal.code, refusal.field)
    })
  }

  test("another organization's deposits are not found", async () => {
    const other = await ledgerFixture(app, 'Nosy Org')
    const deposit = (await declare({ accountId: alice, asset: 'USDC', amount: '1' })).body
    expect((await other.call('GET', `/v1/deposits/${deposit.id}`)).status).toBe(404)
    expect((await other.call('GET', '/v1/deposits')).body).toEqual({ deposits: [], hasMore: false })
  })

  test('the list pages with after and limit', async () => {
    const account = await fx.mint('pages')
    const ids: string[] = []
    for (let index = 0; index < 3; index++) ids.push((await declare({ accountId: account, asset: 'USDC', amount: '1' })).body.id)
    const first = await fx.call('GET', `/v1/deposits?accountId=${account}&limit=2`)
    expect(first.body.deposits.map((entry: { id: string }) => entry.id)).toEqual(ids.slice(0, 2))
    expect(first.body.hasMore).toBe(true)
    const second = await fx.call('GET', `/v1/deposits?accountId=${account}&limit=2&after=${ids[1]}`)
    expect(second.body).toMatchObject({ hasMore: false })
    expect(second.body.deposits.map((entry: { id: string }) => entry.id)).toEqual(ids.slice(2))
    expect((await fx.call('GET', '/v1/deposits?limit=0')).body.error).toMatchObject({ code: 'invalid_request', field: 'limit' })
  })
})

describe('suspense', () => {
  const unknownSui = () => `0x${Array.from({ length: 64 }, () => '0123456789abcdef'[Math.floor(Math.random() * 16)]).join('')}`

  test('an arrival matching nothing is credited to no account and waits in suspense for operators', async () => {
    const before = { alice: await fx.balance(alice), bob: await fx.balance(bob) }
    const clearing = await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.chainClearing, 'USDC')
    const arrival = await arrive(suiArrival(unknownSui(), '9'))
    expect(arrival.status).toBe(201)
    expect(arrival.body).toMatchObject({ disposition: 'suspense', accountId: null, depositId: null, state: 'confirming' })
    expect(await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.chainClearing, 'USDC')).toBe(clearing)
    const listed = await app.ops('GET', `/ops/v1/suspense?orgId=${fx.org.id}&disposition=suspense`)
    expect(listed.status).toBe(200)
    expect(listed.body.arrivals.map((entry: { id: string }) => entry.id)).toContain(arrival.body.id)

    // Not yet final: neither assignable nor returnable.
    await expectRefusedWithoutAnyChange(app, () => app.ops('POST', `/ops/v1/suspense/${arrival.body.id}/assign`, { accountId: bob }), 409, 'conflict')
    await advance(1)
    expect(await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDC')).toBeGreaterThanOrEqual(9_000_000n)
    expect((await app.ops('GET', `/ops/v1/suspense/${arrival.body.id}`)).body).toMatchObject({ state: 'final', disposition: 'suspense' })
    expect({ alice: await fx.balance(alice), bob: await fx.balance(bob) }).toEqual(before)
    await expectVerified(app)
  })

  test('an operator assigns a final suspense arrival to an account: credited as a completed deposit, once', async () => {
    const account = await fx.mint('assignee')
    const body = suiArrival(unknownSui(), '11')
    const arrival = (await arrive(body)).body
    await advance(1)
    const suspense = await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDC')
    await expectRefusedWithoutAnyChange(app, () => app.ops('POST', `/ops/v1/suspense/${arrival.id}/assign`, { accountId: 'acct_00000000000000000000000000000000' }), 404, 'not_found', 'accountId')
    const assigned = await app.ops('POST', `/ops/v1/suspense/${arrival.id}/assign`, { accountId: account, note: 'customer wrote in' })
    expect(assigned.status).toBe(200)
    expect(assigned.body).toMatchObject({ disposition: 'assigned', accountId: account, resolutionNote: 'customer wrote in' })
    expect(await fx.balance(account)).toMatchObject({ available: '11.000000', total: '11.000000' })
    expect(await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDC')).toBe(suspense - 11_000_000n)
    const deposit = (await fx.call('GET', `/v1/deposits/${assigned.body.depositId}`)).body
    expect(deposit).toMatchObject({ source: 'suspense_assignment', state: 'completed', receivedAmount: '11.000000', txHash: body.txHash })
    const [event] = (await eventsOf(app, 'funding.deposit.confirmed')).filter((entry) => entry.data.depositId === deposit.id)
    expect(event!.data).toMatchObject({ accountId: account, amount: '11.000000', digest: body.txHash, source: 'suspense_assignment' })
    await expectRefusedWithoutAnyChange(app, () => app.ops('POST', `/ops/v1/suspense/${arrival.id}/assign`, { accountId: account }), 409, 'conflict')
    await expectRefusedWithoutAnyChange(app, () => app.ops('POST', `/ops/v1/suspense/${arrival.id}/return`, {}), 409, 'conflict')
    await expectVerified(app)
  })

  test("an assignment only credits an account of the arrival's own organization", async () => {
    const other = await ledgerFixture(app, 'Foreign Org')
    const foreign = await other.mint('foreign')
    const arrival = (await arrive(suiArrival(unknownSui(), '2'))).body
    await advance(1)
    await expectRefusedWithoutAnyChange(app, () => app.ops('POST', `/ops/v1/suspense/${arrival.id}/assign`, { accountId: foreign }), 404, 'not_found', 'accountId')
  })

  test('an operator returns a final suspense arrival: it leaves suspense for chain clearing', async () => {
    const arrival = (await arrive(tronArrival('TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZY', '4'))).body
    expect(arrival.disposition).toBe('suspense')
    await advance(57)
    const suspense = await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDT')
    const returned = await app.ops('POST', `/ops/v1/suspense/${arrival.id}/return`, { note: 'unknown sender' })
    expect(returned.status).toBe(200)
    expect(returned.body).toMatchObject({ disposition: 'returned', accountId: null })
    expect(await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDT')).toBe(suspense - 4_000_000n)
    expect((await app.ops('GET', `/ops/v1/suspense?orgId=${fx.org.id}&disposition=returned`)).body.arrivals.map((entry: { id: string }) => entry.id)).toContain(arrival.id)
    await expectRefusedWithoutAnyChange(app, () => app.ops('POST', `/ops/v1/suspense/${arrival.id}/assign`, { accountId: bob }), 409, 'conflict')
    await expectVerified(app)
  })

  test("an arrival at another organization's deposit address is suspense, never credit to that organization", async () => {
    const other = await ledgerFixture(app, 'Owner Org')
    const owner = await other.mint('owner')
    const address = (await other.call('POST', `/v1/accounts/${owner}/deposit-addresses`, { asset: 'USDC' })).body.address
    const arrival = await arrive(suiArrival(address, '5'))
    expect(arrival.body).toMatchObject({ disposition: 'suspense', orgId: fx.org.id })
    await advance(1)
    expect(await other.balance(owner)).toMatchObject({ total: '0.000000' })
    await expectVerified(app)
  })

  test('a deposit arrival is not a suspense item, and suspense needs the operator token', async () => {
    const { address } = await addressOf(alice, 'USDC')
    const arrival = (await arrive(suiArrival(address, '1'))).body
    expect((await app.ops('GET', `/ops/v1/suspense/${arrival.id}`)).status).toBe(404)
    expect((await app.call('GET', '/ops/v1/suspense', { key: fx.org.testKey })).status).toBe(401)
    await advance(1)
  })
})

describe('restart', () => {
  test('an arrival observed before a restart is still in flight after it and available at finality', async () => {
    const account = await fx.mint('restart')
    const { address } = await addressOf(account, 'USDT')
    const arrival = (await arrive(tronArrival(address, '21'))).body
    await app.kassa.runtime.ledger.drain()
    // Stop the first instance's loops; the second instance owns finality now.
    for (const stop of app.kassa.runtime.stoppers.splice(0)) await stop()
    const second: Kassa = await createApp(configForTests({ databaseUrl: app.config.databaseUrl }), { database: await app.database.open(), wallClockMs: () => WALL_CLOCK_MS })
    const call = async (method: string, path: string, body?: unknown) => {
      const response = await second.app.handle(
        new Request(`http://kassa.test${path}`, { method, headers: { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }),
      )
      return { status: response.status, body: (await response.json()) as any }
    }
    const usdt = async () => (await call('GET', `/v1/accounts/${account}/balances`)).body.balances.find((entry: { asset: string }) => entry.asset === 'USDT')
    try {
      expect(await usdt()).toMatchObject({ inFlight: '21.000000', available: '0.000000' })
      expect((await call('POST', '/v1/sandbox/chain/arrivals', tronArrival(address, '21'))).status).toBe(201)
      // The same arrival again, on the new instance: still credited once.
      expect((await call('POST', '/v1/sandbox/chain/arrivals', { network: 'tron', asset: 'USDT', address, amount: '21', txHash: arrival.txHash })).status).toBe(200)
      expect((await call('POST', '/v1/sandbox/clock/advance', { seconds: 57 })).status).toBe(200)
      expect(await usdt()).toMatchObject({ inFlight: '0.000000', available: '42.000000', total: '42.000000' })
      await second.runtime.ledger.drain()
      const report = await second.app.handle(new Request('http://kassa.test/ops/v1/ledger/verify', { headers: { authorization: `Bearer ${app.config.operatorToken}` } }))
      expect(((await report.json()) as { ok: boolean }).ok).toBe(true)
    } finally {
      for (const stop of second.runtime.stoppers.splice(0)) await stop()
    }
  })
})
