import { expect } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { TestApp, TestResponse } from '../support/app.ts'
import { expectVerified, ledgerFixture, ledgerState, type LedgerFixture } from '../ledger/support.ts'
import { eventually } from '../support/eventually.ts'

export const SUI_DESTINATION = `0x${'5a'.repeat(32)}`
// The USDT contract on Tron mainnet: a real, valid base58check address.
export const TRON_DESTINATION = 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t'
export const DAY_SECONDS = 24 * 3600

/** An organization with a second secret-level key, so a withdrawal can get its second approval. */
export interface WithdrawalFixture extends LedgerFixture {
  secondKey: string
  secondKeyId: string
  /** Calls with the second key. */
  callAs(key: string, method: string, path: string, body?: unknown): Promise<TestResponse>
  /** Registers a destination and lets its 24 h timelock pass; answers the active entry's id. */
  activeEntry(accountId: string, network: 'sui' | 'tron', address: string): Promise<string>
  quote(accountId: string, amount: string, asset?: string): Promise<string>
  withdraw(body: { accountId: string; allowlistEntryId: string; quoteId: string }, key?: string): Promise<TestResponse>
  waitForState(withdrawalId: string, state: string): Promise<any>
  advance(seconds: number): Promise<void>
}

export async function withdrawalFixture(app: TestApp, name = 'Withdrawals Org'): Promise<WithdrawalFixture> {
  const fx = await ledgerFixture(app, name)
  const issued = await app.ops('POST', `/ops/v1/orgs/${fx.org.id}/keys`, { type: 'test', environment: 'sandbox' })
  expect(issued.status).toBe(201)
  const callAs = (key: string, method: string, path: string, body?: unknown) => app.call(method, path, { key, body })
  const advance = async (seconds: number) => {
    expect((await fx.call('POST', '/v1/sandbox/clock/advance', { seconds })).status).toBe(200)
  }
  return {
    ...fx,
    secondKey: issued.body.key,
    secondKeyId: issued.body.id,
    callAs,
    advance,
    async activeEntry(accountId, network, address) {
      const entry = await fx.call('POST', `/v1/accounts/${accountId}/allowlist`, { network, address })
      expect(entry.status).toBe(201)
      await advance(DAY_SECONDS)
      expect((await fx.call('GET', `/v1/allowlist/${entry.body.id}`)).body.state).toBe('active')
      return entry.body.id
    },
    async quote(accountId, amount, asset = 'USDC') {
      const response = await fx.call('POST', '/v1/quotes', { kind: 'withdrawal', accountId, asset, amount })
      expect(response.status).toBe(201)
      return response.body.id
    },
    withdraw(body, key = fx.org.testKey) {
      return app.call('POST', '/v1/withdrawals', { key, body })
    },
    waitForState(withdrawalId, state) {
      return eventually(async () => (await fx.call('GET', `/v1/withdrawals/${withdrawalId}`)).body, { what: `withdrawal ${withdrawalId} becoming ${state}`, accept: (current: any) => current.state === state })
    },
  }
}

/**
 * Approved withdrawals are broadcast in the background; waits until none is left approved, so a
 * before/after comparison is not disturbed by a broadcast of an earlier step.
 */
export async function settleBroadcasts(app: TestApp): Promise<void> {
  await eventually(async () => {
    const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) from withdrawals where state = 'approved'`)
    return Number(row!.count) === 0
  }, { what: 'every approved withdrawal broadcast' })
}

/** Everything a refusal must leave unchanged: the ledger, the withdrawals and the quotes' states. */
export async function withdrawalState(app: TestApp): Promise<unknown> {
  await settleBroadcasts(app)
  const ledger = await ledgerState(app)
  const withdrawals = await queryRows(app.kassa.runtime.db, sql`select id, state from withdrawals order by id`)
  const quotes = await queryRows(app.kassa.runtime.db, sql`select id, state from quotes order by id`)
  const entries = await queryRows(app.kassa.runtime.db, sql`select id, state from allowlist_entries order by id`)
  return { ledger, withdrawals, quotes, entries }
}

export async function expectWithdrawalRefused(app: TestApp, send: () => Promise<TestResponse>, status: number, code: string, field?: string): Promise<TestResponse> {
  const before = await withdrawalState(app)
  const response = await send()
  const expected: Record<string, unknown> = { status, code }
  const actual: Record<string, unknown> = { status: response.status, code: response.body?.error?.code }
  if (field !== undefined) {
    expected.field = field
    actual.field = response.body?.error?.field
  }
  expect(actual).toEqual(expected)
  expect(await withdrawalState(app)).toEqual(before)
  await expectVerified(app)
  return response
}

/** A system account's balance of an asset, from the database. */
export async function systemBalance(app: TestApp, orgId: string, accountId: string, asset: string): Promise<bigint> {
  await app.kassa.runtime.ledger.drain()
  const [row] = await queryRows<{ available: string }>(
    app.kassa.runtime.db,
    sql`select available::text as available from ledger_balances where org_id = ${orgId} and account_id = ${accountId} and asset = ${asset}`,
  )
  return row ? BigInt(row.available) : 0n
}

export async function eventsOf(app: TestApp, orgId: string, prefix: string): Promise<Array<{ type: string; data: any }>> {
  return queryRows(app.kassa.runtime.db, sql`select type, data from events where org_id = ${orgId} and type like ${`${prefix}%`} order by seq`)
}
