import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'

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
})
afterAll(async () => {
  await app.close()
})

describe('transfers', () => {
  test('an inclusive transfer takes the fee out of the amount and itemizes it', async () => {
    const response = await fx.call('POST', '/v1/transfers', { sourceAccountId: alice, destinationAccountId: bob, asset: 'USDC', amount: '100', description: 'rent' })
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({
      state: 'completed',
      amount: '100.000000',
      feeModel: 'inclusive',
      fee: '0.110000',
      netAmount: '99.890000',
      totalDebited: '100.000000',
      holdId: null,
      description: 'rent',
    })
    expect(response.body.id).toMatch(/^tr_[0-9a-f]{32}$/)
    expect(await fx.balance(alice)).toMatchObject({ available: '900.000000', total: '900.000000' })
    expect(await fx.balance(bob)).toMatchObject({ available: '99.890000', total: '99.890000' })
    const read = await fx.call('GET', `/v1/transfers/${response.body.id}`)
    expect(read.body).toEqual(response.body)
    await expectVerified(app)
  })

  test('an additive transfer charges the fee on top and the destination gets the whole amount', async () => {
    const response = await fx.call('POST', '/v1/transfers', { sourceAccountId: alice, destinationAccountId: bob, asset: 'USDC', amount: '10', feeModel: 'additive' })
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({ fee: '0.020000', netAmount: '10.000000', totalDebited: '10.020000' })
    expect(await fx.balance(alice)).toMatchObject({ available: '889.980000' })
    expect(await fx.balance(bob)).toMatchObject({ available: '109.890000' })
  })

  test('fees land on the organization fee account and the transfer writes its event in the same commit', async () => {
    const fees = app.kassa.runtime.ledger.balance(fx.org.id, 'system:fees', 'USDC')
    expect(fees?.available).toBe(130_000n)
    const events = await queryRows<{ type: string; data: { id: string; fee: string } }>(
      app.kassa.runtime.db,
      sql`select type, data from events where org_id = ${fx.org.id} and type = 'transfer.completed' order by seq`,
    )
    expect(events.map((event) => event.data.fee)).toEqual(['0.110000', '0.020000'])
  })

  test('lists transfers by account with a cursor', async () => {
    const carol = await fx.mint('carol')
    await fx.call('POST', '/v1/transfers', { sourceAccountId: alice, destinationAccountId: carol, asset: 'USDC', amount: '1' })
    const first = await fx.call('GET', `/v1/transfers?accountId=${bob}&limit=1`)
    expect(first.status).toBe(200)
    expect(first.body.transfers).toHaveLength(1)
    expect(first.body.hasMore).toBe(true)
    const second = await fx.call('GET', `/v1/transfers?accountId=${bob}&limit=5&after=${first.body.transfers[0].id}`)
    expect(second.body.transfers).toHaveLength(1)
    expect(second.body.hasMore).toBe(false)
    const carols = await fx.call('GET', `/v1/transfers?accountId=${carol}`)
    expect(carols.body.transfers.map((transfer: { destinationAccountId: string }) => transfer.destinationAccountId)).toEqual([carol])
  })

  test('refuses a page size outside 1 to 200 naming limit', async () => {
    for (const limit of ['0', '201', '-1', 'abc']) {
      const response = await fx.call('GET', `/v1/transfers?limit=${limit}`)
      expect(response.status).toBe(400)
      expect(response.body.error).toMatchObject({ code: 'invalid_request', field: 'limit' })
    }
  })

  const refusals: Array<{ name: string; body: () => Record<string, unknown>; status: number; code: string; field?: string }> = [
    { name: 'more than available', body: () => ({ amount: '5000' }), status: 422, code: 'insufficient_available' },
    { name: 'additive fee pushes past available', body: () => ({ amount: '889', feeModel: 'additive' }), status: 422, code: 'insufficient_available' },
    { name: 'below the minimum', body: () => ({ amount: '0.09' }), status: 422, code: 'min_amount', field: 'amount' },
    { name: 'above the per-transfer limit', body: () => ({ amount: '1000000.000001' }), status: 422, code: 'limit_exceeded', field: 'amount' },
    { name: 'an unsupported asset', body: () => ({ asset: 'DOGE' }), status: 422, code: 'unsupported_asset', field: 'asset' },
    { name: 'more decimals than the asset has', body: () => ({ amount: '1.0000001' }), status: 400, code: 'invalid_request', field: 'amount' },
    { name: 'a number instead of a decimal string', body: () => ({ amount: 5 }), status: 400, code: 'invalid_request' },
    { name: 'the same account on both sides', body: () => ({ destinationAccountId: alice }), status: 400, code: 'invalid_request', field: 'destinationAccountId' },
    { name: 'an unknown destination', body: () => ({ destinationAccountId: 'acct_00000000000000000000000000000000' }), status: 404, code: 'not_found' },
    { name: 'an unknown hold', body: () => ({ holdId: 'hold_00000000000000000000000000000000' }), status: 404, code: 'not_found' },
  ]
  for (const refusal of refusals) {
    test(`rejects a transfer with ${refusal.name} and changes nothing`, async () => {
      const response = await expectRefusedWithoutChange(
        app,
        () => fx.call('POST', '/v1/transfers', { sourceAccountId: alice, destinationAccountId: bob, asset: 'USDC', amount: '1', ...refusal.body() }),
        refusal.status,
        refusal.code,
      )
      if (refusal.field) expect(response.body.error.field).toBe(refusal.field)
    })
  }

  test('rejects a transfer from another organization\'s account as not found', async () => {
    const other = await ledgerFixture(app, 'Other Org')
    const stranger = await other.mint('stranger')
    await other.fund(stranger, '50')
    await expectRefusedWithoutChange(
      app,
      () => fx.call('POST', '/v1/transfers', { sourceAccountId: stranger, destinationAccountId: bob, asset: 'USDC', amount: '1' }),
      404,
      'not_found',
    )
    expect((await fx.call('GET', `/v1/accounts/${stranger}/balances`)).status).toBe(404)
  })

  test('a frozen account cannot send but can receive, and unfreezing restores it', async () => {
    const frozen = await app.ops('POST', `/ops/v1/accounts/${bob}/freeze`)
    expect(frozen.status).toBe(200)
    expect(frozen.body.status).toBe('frozen')
    await expectRefusedWithoutChange(
      app,
      () => fx.call('POST', '/v1/transfers', { sourceAccountId: bob, destinationAccountId: alice, asset: 'USDC', amount: '1' }),
      422,
      'account_frozen',
    )
    await expectRefusedWithoutChange(
      app,
      () => fx.call('POST', '/v1/holds', { accountId: bob, asset: 'USDC', amount: '1', expiresInSeconds: 600 }),
      422,
      'account_frozen',
    )
    const incoming = await fx.call('POST', '/v1/transfers', { sourceAccountId: alice, destinationAccountId: bob, asset: 'USDC', amount: '1' })
    expect(incoming.status).toBe(201)
    expect((await app.ops('POST', `/ops/v1/accounts/${bob}/unfreeze`)).body.status).toBe('active')
    const outgoing = await fx.call('POST', '/v1/transfers', { sourceAccountId: bob, destinationAccountId: alice, asset: 'USDC', amount: '1' })
    expect(outgoing.status).toBe(201)
    await expectVerified(app)
  })

  test('freezing needs the operator token', async () => {
    const response = await fx.call('POST', `/ops/v1/accounts/${bob}/freeze`)
    expect(response.status).toBe(401)
  })

  test('balances always satisfy total = available + held + inFlight + allocations', async () => {
    const response = await fx.call('GET', `/v1/accounts/${alice}/balances`)
    expect(response.body.balances.map((entry: { asset: string }) => entry.asset)).toEqual(['USDC', 'USDT'])
    for (const entry of response.body.balances) {
      const minor = (value: string) => BigInt(value.replace('.', ''))
      const allocated = entry.allocations.reduce((sum: bigint, allocation: { value: string }) => sum + minor(allocation.value), 0n)
      expect(minor(entry.total)).toBe(minor(entry.available) + minor(entry.held) + minor(entry.inFlight) + allocated)
    }
  })
})
