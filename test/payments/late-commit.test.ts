import { afterAll, beforeAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { AUTHORIZATION_ANSWER_MARGIN_MS, AUTHORIZATION_BUDGET_MS } from '../../server/modules/payments/state.ts'
import type { TestApp, TestResponse } from '../support/app.ts'
import { expectVerified, type LedgerFixture } from '../ledger/support.ts'
import { afterFailClosedRelease, fundedCardHolder } from './support.ts'

// An app of its own: the writer's pace, which the slow commit below raises, steers later tests' batches.
let app: TestApp
let fx: LedgerFixture
let payer: string

beforeAll(async () => {
  ;({ app, fx, payer } = await fundedCardHolder())
})
afterAll(async () => {
  await app.close()
})

test('a commit whose reply is handled only after the decision was due is declined, never approved late, and the write that landed is released', async () => {
  // The thread is busy past the deadline right as the commit comes back (a server running late
  // past capacity): the reply is handled before the budget's timer gets its turn. The answer is
  // the one the timer would have given.
  const writer = app.kassa.runtime.ledger.writer as unknown as Record<string, (run: () => Promise<unknown>) => Promise<unknown>>
  const execute = writer.execute!
  const budgetMs = 200
  const decidedWithinMs = budgetMs - Math.min(AUTHORIZATION_ANSWER_MARGIN_MS, budgetMs / 2)
  writer.execute = async (run) => {
    const calledAt = performance.now()
    const rows = await execute.call(writer, run)
    // Synchronously, so no timer can run meanwhile: the reply is handled past the deadline.
    while (performance.now() - calledAt < decidedWithinMs + 50) {}
    return rows
  }
  app.kassa.payments.configure({ budgetMs })
  const before = await fx.balance(payer)
  let response: TestResponse
  try {
    response = await fx.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount: '7' })
  } finally {
    writer.execute = execute
    app.kassa.payments.configure({ budgetMs: AUTHORIZATION_BUDGET_MS })
  }
  expect(response.status).toBe(201)
  expect(response.body).toMatchObject({ state: 'declined', failureCode: 'processing_timeout' })
  // The write landed; the fail-closed release follows it.
  await afterFailClosedRelease(app, fx, response.body.id)
  expect(await fx.balance(payer)).toEqual(before)
  const capture = await fx.call('POST', `/v1/payments/${response.body.id}/capture`, {})
  expect({ status: capture.status, code: capture.body.error.code }).toEqual({ status: 409, code: 'hold_not_active' })
  const events = await queryRows<{ type: string }>(app.kassa.runtime.db, sql`select type from events where data->>'paymentId' = ${response.body.id} order by id`)
  expect(events.map((row) => row.type)).toEqual(['payment.authorized', 'payment.declined'])
  await expectVerified(app)
})
