import { startTestApp, type TestApp } from '../support/app.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'

/** A test app with an organization whose card holder (`card-holder`) is funded with 100 USDC. */
export async function fundedCardHolder(): Promise<{ app: TestApp; fx: LedgerFixture; payer: string }> {
  const app = await startTestApp()
  const fx = await ledgerFixture(app)
  const payer = await fx.mint('card-holder')
  await fx.fund(payer, '100')
  return { app, fx, payer }
}
