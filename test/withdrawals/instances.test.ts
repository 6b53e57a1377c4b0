import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { createApp, type Kassa } from '../../server/app.ts'
import { expectVerified } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { SUI_DESTINATION, withdrawalFixture, type WithdrawalFixture } from './support.ts'

// Both instances read the same frozen wall clock, so nothing settles on the chain on its own.
const WALL_MS = Date.now()
let app: TestApp
let second: Kassa
let fx: WithdrawalFixture
let account: string
let entry: string

/** A request to the second instance, with the organization's test key. */
async function callSecond(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await second.app.handle(
    new Request(`http://kassa.test${path}`, {
      method,
      headers: { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    }),
  )
  return { status: response.status, body: await response.json() }
}

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => WALL_MS })
  fx = await withdrawalFixture(app, 'Two Instances Org')
  account = await fx.mint('shared')
  await fx.fund(account, '1000')
  entry = await fx.activeEntry(account, 'sui', SUI_DESTINATION)
  // The second instance starts on the same database after the setup, so its memory holds the same balances.
  const handle = await app.database.open()
  // On the embedded database both instances share one handle; only the first closes it.
  const shared = app.database.databaseUrl === undefined ? { ...handle, close: async () => {} } : handle
  second = await createApp(app.config, { database: shared, wallClockMs: () => WALL_MS })
})
afterAll(async () => {
  await second?.close()
  await app.close()
})

async function movementsOf(reference: string): Promise<string[]> {
  const rows = await queryRows<{ kind: string }>(app.kassa.runtime.db, sql`select kind from ledger_movements where reference = ${reference} order by kind`)
  return rows.map((row) => row.kind)
}

describe('two app instances on one database', () => {
  test('a quote sent to both instances at once is executed by exactly one withdrawal', async () => {
    const quoteId = await fx.quote(account, '100')
    const body = { accountId: account, allowlistEntryId: entry, quoteId }
    const answers = await Promise.all([fx.withdraw(body), callSecond('POST', '/v1/withdrawals', body), fx.withdraw(body), callSecond('POST', '/v1/withdrawals', body)])
    const made = answers.filter((answer) => answer.status === 201)
    expect(made).toHaveLength(1)
    expect(answers.filter((answer) => answer.status !== 201).map((answer) => answer.body.error.code)).toEqual(['quote_consumed', 'quote_consumed', 'quote_consumed'])
    const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) from withdrawals where quote_id = ${quoteId}`)
    expect(Number(row!.count)).toBe(1)
    expect(await movementsOf(made[0]!.body.id)).toEqual(['withdrawal_reserve'])
    await expectVerified(app)
  })

  test('the same chain outcome applied on both instances closes the withdrawal once', async () => {
    // Hot balances are per process: each instance re-reads them, as a restarted instance would.
    await app.kassa.runtime.ledger.load()
    await second.runtime.ledger.load()
    const quoteId = await fx.quote(account, '50')
    const created = await fx.withdraw({ accountId: account, allowlistEntryId: entry, quoteId })
    expect(created.status).toBe(201)
    const submitted = await fx.waitForState(created.body.id, 'submitted')
    const outcome = {
      withdrawalId: created.body.id,
      orgId: fx.org.id,
      status: 'completed' as const,
      evidence: { txHash: submitted.txHash, network: 'sui' as const, block: '7', confirmations: 1, confirmedAt: new Date(WALL_MS).toISOString() },
    }
    // The second instance's memory predates this withdrawal's reservation.
    await second.runtime.ledger.load()
    await Promise.all([app.kassa.withdrawals.applyOutcome(outcome), second.withdrawals.applyOutcome(outcome), app.kassa.withdrawals.applyOutcome(outcome), second.withdrawals.applyOutcome(outcome)])
    expect((await fx.waitForState(created.body.id, 'confirmed')).chainEvidence).toEqual(outcome.evidence)
    expect(await movementsOf(created.body.id)).toEqual(['withdrawal_complete', 'withdrawal_reserve'])
    const [events] = await queryRows<{ count: string }>(
      app.kassa.runtime.db,
      sql`select count(*) from events where type = 'treasury.withdrawal.completed' and data->>'id' = ${created.body.id}`,
    )
    expect(Number(events!.count)).toBe(1)
    await expectVerified(app)
  })
})
