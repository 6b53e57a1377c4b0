import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { consumeQuote } from '../../server/modules/quotes/service.ts'

let app: TestApp
let fx: LedgerFixture
let account: string

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app)
  account = await fx.mint('quoter')
})
afterAll(async () => {
  await app.close()
})

const quote = (body: Record<string, unknown> = {}) => fx.call('POST', '/v1/quotes', { kind: 'withdrawal', accountId: account, asset: 'USDC', amount: '100', ...body })
const consume = (id: string) => consumeQuote(app.kassa.runtime.db, fx.org.id, id, app.kassa.runtime.clock.now(fx.org.id))

describe('quotes', () => {
  test('a withdrawal quote is all-in and itemized, open until its expiry', async () => {
    const response = await quote()
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({
      kind: 'withdrawal',
      amount: '100.000000',
      fees: { network: '0.050000', service: '0.150000' },
      totalDebited: '100.200000',
      state: 'open',
    })
    expect(new Date(response.body.expiresAt).getTime() - new Date(response.body.createdAt).getTime()).toBe(60_000)
    expect((await fx.call('GET', `/v1/quotes/${response.body.id}`)).body).toEqual(response.body)
  })

  test('a quote executes once; the second execution is quote_consumed', async () => {
    const { id } = (await quote()).body
    expect((await consume(id)).state).toBe('consumed')
    await expect(consume(id)).rejects.toMatchObject({ code: 'quote_consumed' })
    expect((await fx.call('GET', `/v1/quotes/${id}`)).body.state).toBe('consumed')
  })

  test('of many simultaneous executions of one quote exactly one wins', async () => {
    const { id } = (await quote()).body
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => consume(id)))
    expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1)
  })

  test('a quote past its expiry on the organization clock is quote_expired', async () => {
    const { id } = (await quote()).body
    await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 60 })
    expect((await fx.call('GET', `/v1/quotes/${id}`)).body.state).toBe('expired')
    await expect(consume(id)).rejects.toMatchObject({ code: 'quote_expired' })
    expect((await fx.call('GET', `/v1/quotes/${id}`)).body.state).toBe('expired')
  })

  test('another organization\'s quote cannot be executed', async () => {
    const { id } = (await quote()).body
    const other = await ledgerFixture(app, 'Other')
    await expect(consumeQuote(app.kassa.runtime.db, other.org.id, id, new Date())).rejects.toMatchObject({ code: 'not_found' })
    expect((await other.call('GET', `/v1/quotes/${id}`)).status).toBe(404)
  })

  const refusals: Array<{ name: string; body: Record<string, unknown>; status: number; code: string }> = [
    { name: 'below the minimum withdrawal', body: { amount: '0.5' }, status: 422, code: 'min_amount' },
    { name: 'above the maximum withdrawal', body: { amount: '100001' }, status: 422, code: 'limit_exceeded' },
    { name: 'an unsupported asset', body: { asset: 'BTC' }, status: 422, code: 'unsupported_asset' },
    { name: 'a kind that is not live', body: { kind: 'instant_redeem' }, status: 400, code: 'invalid_request' },
    { name: 'an unknown account', body: { accountId: 'acct_00000000000000000000000000000000' }, status: 404, code: 'not_found' },
  ]
  for (const refusal of refusals) {
    test(`rejects a quote with ${refusal.name} and writes nothing`, async () => {
      await expectRefusedWithoutChange(app, () => quote(refusal.body), refusal.status, refusal.code)
    })
  }
})
