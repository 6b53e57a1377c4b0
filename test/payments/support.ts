import { expect } from 'bun:test'
import { startTestApp, type TestApp, type TestResponse } from '../support/app.ts'
import type { RuntimeOptions } from '../../server/runtime.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { eventually } from '../support/eventually.ts'

/** A test app with an organization whose card holder (`card-holder`) is funded with 100 USDC. */
export async function fundedCardHolder(runtimeOptions: RuntimeOptions = {}): Promise<{ app: TestApp; fx: LedgerFixture; payer: string }> {
  const app = await startTestApp({}, runtimeOptions)
  const fx = await ledgerFixture(app)
  const payer = await fx.mint('card-holder')
  await fx.fund(payer, '100')
  return { app, fx, payer }
}

/**
 * A fail-closed decline whose late write landed, once its release has landed too: read back after
 * each drain of the writer until its hold is released. Answers the payment as stored.
 */
export async function afterFailClosedRelease(app: TestApp, fx: LedgerFixture, paymentId: string): Promise<TestResponse> {
  const stored = await eventually(async () => {
    await app.kassa.runtime.ledger.drain()
    const payment = await fx.call('GET', `/v1/payments/${paymentId}`)
    const hold = payment.body.holdId ? (await fx.call('GET', `/v1/holds/${payment.body.holdId}`)).body : undefined
    return hold?.state === 'released' ? payment : undefined
  }, { what: `the release of ${paymentId}'s late write`, timeoutMs: 5_000 })
  expect(stored!.body).toMatchObject({ state: 'declined', failureCode: 'processing_timeout' })
  expect((await fx.call('GET', `/v1/holds/${stored!.body.holdId}`)).body.state).toBe('released')
  return stored!
}
