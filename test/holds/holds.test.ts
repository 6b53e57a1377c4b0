import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { whileExpiryCommits } from '../support/writer.ts'
import { eventually } from '../support/eventually.ts'

let app: TestApp
let fx: LedgerFixture
let payer: string
let merchant: string

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app)
  payer = await fx.mint('payer')
  merchant = await fx.mint('merchant')
  await fx.fund(payer, '100')
})
afterAll(async () => {
  await app.close()
})

const placeHold = (amount: string, expiresInSeconds = 600) => fx.call('POST', '/v1/holds', { accountId: payer, asset: 'USDC', amount, expiresInSeconds })

describe('holds', () => {
  test('a hold moves available to held and is pending', async () => {
    const response = await placeHold('30')
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({ state: 'pending', amount: '30.000000', accountId: payer, capturedAmount: null, transferId: null })
    expect(response.body.id).toMatch(/^hold_[0-9a-f]{32}$/)
    expect(await fx.balance(payer)).toMatchObject({ total: '100.000000', available: '70.000000', held: '30.000000' })
    expect((await fx.call('GET', `/v1/holds/${response.body.id}`)).body).toEqual(response.body)
    const released = await fx.call('POST', `/v1/holds/${response.body.id}/release`)
    expect(released.status).toBe(200)
    expect(released.body.state).toBe('released')
    expect(await fx.balance(payer)).toMatchObject({ available: '100.000000', held: '0.000000' })
  })

  test('a partial capture pays the destination and returns the remainder in the same commit', async () => {
    const hold = (await placeHold('40')).body
    const captured = await fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant, amount: '25' })
    expect(captured.status).toBe(200)
    expect(captured.body).toMatchObject({ state: 'captured', capturedAmount: '25.000000' })
    const transfer = await fx.call('GET', `/v1/transfers/${captured.body.transferId}`)
    expect(transfer.body).toMatchObject({ holdId: hold.id, amount: '25.000000', fee: '0.035000', netAmount: '24.965000' })
    expect(await fx.balance(payer)).toMatchObject({ total: '75.000000', available: '75.000000', held: '0.000000' })
    expect(await fx.balance(merchant)).toMatchObject({ available: '24.965000' })
    const movements = await app.kassa.runtime.db.query.ledgerMovements.findMany({ where: (table, { eq }) => eq(table.reference, captured.body.transferId) })
    expect(movements).toHaveLength(1)
    await expectVerified(app)
  })

  test('a capture without an amount takes the whole hold', async () => {
    const hold = (await placeHold('5')).body
    const captured = await fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant })
    expect(captured.body).toMatchObject({ state: 'captured', capturedAmount: '5.000000' })
    expect(await fx.balance(payer)).toMatchObject({ available: '70.000000', held: '0.000000' })
  })

  test('a transfer with holdId pays from the hold', async () => {
    const hold = (await placeHold('10')).body
    const transfer = await fx.call('POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: merchant, asset: 'USDC', amount: '4', feeModel: 'additive', holdId: hold.id })
    expect(transfer.status).toBe(201)
    expect(transfer.body).toMatchObject({ holdId: hold.id, totalDebited: '4.014000', netAmount: '4.000000' })
    expect((await fx.call('GET', `/v1/holds/${hold.id}`)).body).toMatchObject({ state: 'captured', capturedAmount: '4.014000', transferId: transfer.body.id })
    expect(await fx.balance(payer)).toMatchObject({ available: '65.986000', held: '0.000000' })
  })

  test('capturing or releasing a hold that is no longer pending is hold_not_active and changes nothing', async () => {
    const hold = (await placeHold('3')).body
    await fx.call('POST', `/v1/holds/${hold.id}/release`)
    await expectRefusedWithoutChange(app, () => fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant }), 409, 'hold_not_active')
    await expectRefusedWithoutChange(app, () => fx.call('POST', `/v1/holds/${hold.id}/release`), 409, 'hold_not_active')
  })

  test('capturing more than the hold is refused and changes nothing', async () => {
    const hold = (await placeHold('3')).body
    await expectRefusedWithoutChange(app, () => fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant, amount: '3.01' }), 400, 'invalid_request')
    await expectRefusedWithoutChange(
      app,
      () => fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant, amount: '3', feeModel: 'additive' }),
      400,
      'invalid_request',
    )
    await fx.call('POST', `/v1/holds/${hold.id}/release`)
  })

  const refusals: Array<{ name: string; body: Record<string, unknown>; status: number; code: string }> = [
    { name: 'more than available', body: { amount: '1000' }, status: 422, code: 'insufficient_available' },
    { name: 'below the minimum', body: { amount: '0.01' }, status: 422, code: 'min_amount' },
    { name: 'above the limit', body: { amount: '2000000' }, status: 422, code: 'limit_exceeded' },
    { name: 'an unsupported asset', body: { asset: 'EUR' }, status: 422, code: 'unsupported_asset' },
    { name: 'a lifetime under a minute', body: { expiresInSeconds: 59 }, status: 400, code: 'invalid_request' },
    { name: 'a lifetime over a week', body: { expiresInSeconds: 7 * 24 * 3600 + 1 }, status: 400, code: 'invalid_request' },
    { name: 'no lifetime', body: { expiresInSeconds: undefined }, status: 400, code: 'invalid_request' },
  ]
  for (const refusal of refusals) {
    test(`rejects a hold with ${refusal.name} and changes nothing`, async () => {
      await expectRefusedWithoutChange(
        app,
        () => fx.call('POST', '/v1/holds', { accountId: payer, asset: 'USDC', amount: '1', expiresInSeconds: 600, ...refusal.body }),
        refusal.status,
        refusal.code,
      )
    })
  }

  test('a hold past its expiry on the organization clock is hold_expired, then expires by itself', async () => {
    const hold = (await placeHold('2', 60)).body
    const advanced = await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 61 })
    expect(advanced.status).toBe(200)
    // Whether the background sweep got there first or not, the answer is the same code.
    const capture = await fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant })
    expect(capture.body.error.code).toBe('hold_expired')
    expect(capture.status).toBe(422)
    await app.kassa.holds.expiry.runOnce()
    const state = await eventually(async () => (await fx.call('GET', `/v1/holds/${hold.id}`)).body.state, { what: 'the hold expired', timeoutMs: 2_000, accept: (value) => value === 'expired' }).catch((error: Error) => error.message)
    expect(state).toBe('expired')
    await expectRefusedWithoutChange(app, () => fx.call('POST', `/v1/holds/${hold.id}/release`), 422, 'hold_expired')
    expect(await fx.balance(payer)).toMatchObject({ held: '0.000000', available: '65.986000' })
    await expectVerified(app)
  })

  test('while its expiry is committing, a hold answers hold_expired, not hold_not_active', async () => {
    const hold = (await placeHold('3', 60)).body
    const advance = async () => expect((await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 61 })).status).toBe(200)
    await whileExpiryCommits(app.kassa, hold.id, advance, async () => {
      const capture = await fx.call('POST', `/v1/holds/${hold.id}/capture`, { destinationAccountId: merchant })
      expect([capture.status, capture.body.error.code]).toEqual([422, 'hold_expired'])
      const release = await fx.call('POST', `/v1/holds/${hold.id}/release`)
      expect([release.status, release.body.error.code]).toEqual([422, 'hold_expired'])
    })
    expect((await fx.call('GET', `/v1/holds/${hold.id}`)).body.state).toBe('expired')
    await expectVerified(app)
  })

  test('another organization cannot see or touch a hold', async () => {
    const hold = (await placeHold('1')).body
    const other = await ledgerFixture(app, 'Other')
    expect((await other.call('GET', `/v1/holds/${hold.id}`)).status).toBe(404)
    await expectRefusedWithoutChange(app, () => other.call('POST', `/v1/holds/${hold.id}/release`), 404, 'not_found')
  })
})
