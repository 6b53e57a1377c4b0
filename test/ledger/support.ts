import { expect } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { TestApp, TestOrg, TestResponse } from '../support/app.ts'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import type { LedgerOperation } from '../../server/ledger/writer.ts'
import { newId } from '../../server/lib/ids.ts'
import { eventRow } from '../../server/modules/events/write-sets.ts'

/** An organization with accounts, ready to move money. */
export interface LedgerFixture {
  app: TestApp
  org: TestOrg
  call(method: string, path: string, body?: unknown): Promise<TestResponse>
  mint(externalId: string): Promise<string>
  fund(accountId: string, amount: string, asset?: string): Promise<void>
  balance(accountId: string, asset?: string): Promise<{ total: string; available: string; held: string; inFlight: string; allocations: Array<{ vaultId: string; shares: string; value: string }> }>
}

export async function ledgerFixture(app: TestApp, name = 'Ledger Org'): Promise<LedgerFixture> {
  const org = await app.createOrg(name)
  // Concurrency tests send hundreds of requests a minute; the contract's default limit is not under test here.
  await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 1_000_000 })
  const call = (method: string, path: string, body?: unknown) => app.call(method, path, { key: org.testKey, body })
  return {
    app,
    org,
    call,
    async mint(externalId) {
      const response = await call('POST', '/v1/accounts', { externalId })
      expect(response.status).toBe(201)
      return response.body.id as string
    },
    async fund(accountId, amount, asset = 'USDC') {
      const response = await call('POST', `/v1/sandbox/accounts/${accountId}/fund`, { asset, amount })
      expect(response.status).toBe(201)
    },
    async balance(accountId, asset = 'USDC') {
      const response = await call('GET', `/v1/accounts/${accountId}/balances`)
      expect(response.status).toBe(200)
      return response.body.balances.find((entry: { asset: string }) => entry.asset === asset)
    },
  }
}

/** Row counts of every table a money movement writes: a refused request must leave them all unchanged. */
export async function ledgerRowCounts(app: TestApp): Promise<Record<string, number>> {
  await app.kassa.runtime.ledger.drain()
  const [row] = await queryRows<Record<string, string>>(
    app.kassa.runtime.db,
    sql`select (select count(*) from ledger_movements) as movements, (select coalesce(sum(cardinality(amounts)), 0) from ledger_movements) as postings,
               (select count(*) from ledger_balances) as balances, (select count(*) from transfers) as transfers,
               (select count(*) from holds) as holds, (select count(*) from quotes) as quotes,
               (select count(*) from events) as events`,
  )
  return Object.fromEntries(Object.entries(row!).map(([key, value]) => [key, Number(value)]))
}

/** Everything observable about money: every balance row in the database and in memory, and the row counts. */
export async function ledgerState(app: TestApp): Promise<unknown> {
  const counts = await ledgerRowCounts(app)
  const rows = await queryRows(app.kassa.runtime.db, sql`select org_id, account_id, asset, available::text, held::text, in_flight::text, total::text from ledger_balances order by 1, 2, 3`)
  const memory = rows.map((row: any) => {
    const hot = app.kassa.runtime.ledger.balance(row.org_id, row.account_id, row.asset)
    return hot && [hot.available, hot.held, hot.inFlight, hot.total].map(String)
  })
  return { counts, rows, memory }
}

export async function expectVerified(app: TestApp): Promise<void> {
  await app.kassa.runtime.ledger.drain()
  const report = await app.ops('GET', '/ops/v1/ledger/verify')
  expect(report.status).toBe(200)
  expect(report.body.problems).toEqual([])
  expect(report.body.ok).toBe(true)
  // Every commit so far found the database equal to memory minus what was still on its way.
  expect(app.kassa.runtime.ledger.writer.invariantBreaches).toBe(0)
}

/** Asserts the refusal and that it changed nothing at all. */
export async function expectRefusedWithoutChange(app: TestApp, send: () => Promise<TestResponse>, status: number, code: string): Promise<TestResponse> {
  const before = await ledgerState(app)
  const response = await send()
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({ status, code })
  expect(await ledgerState(app)).toEqual(before)
  return response
}

/** The database's message for a statement it refuses (drizzle wraps it as the cause). */
export async function refusal(run: () => PromiseLike<unknown>): Promise<string> {
  try {
    await run()
  } catch (error) {
    const cause = (error as { cause?: { message?: string } }).cause
    return cause?.message ?? String(error)
  }
  return 'not refused'
}

/** A faucet credit of `amountMinor` to an account, with its event, handed straight to the ledger (tests of the writer). */
export function faucetCredit(orgId: string, accountId: string, amountMinor: bigint, extra: Partial<LedgerOperation> = {}): LedgerOperation & { movementId: string; reference: string } {
  const now = new Date()
  const movementId = newId('mv')
  return {
    orgId,
    movementId,
    movementKind: 'sandbox_funding',
    reference: movementId,
    createdAt: now,
    postings: [
      { accountId, kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor },
      { accountId: SYSTEM_ACCOUNTS.faucet, kind: 'system', bucket: 'available', asset: 'USDC', amountMinor: -amountMinor },
    ],
    events: [eventRow(orgId, 'account.funded', { accountId }, now)],
    ...extra,
  } as LedgerOperation & { movementId: string; reference: string }
}
