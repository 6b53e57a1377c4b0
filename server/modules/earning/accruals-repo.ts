import { and, asc, eq, gte, lte, sql, type SQL } from 'drizzle-orm'
import { queryRows, type Executor, type Transaction } from '../../../db/client.ts'
import { vaultAccrualDays, vaultAccruals, vaultPrices } from '../../../db/schema/index.ts'
import { isoOf } from '../../lib/time.ts'

export type AccrualRecord = typeof vaultAccruals.$inferSelect

/**
 * The settled intents that changed a vault's shares in [from, to): those of the cycles settled
 * then (found through the cycles, by their index) and instant redemptions (a partial index).
 * Each as (org_id, account_id, kind, shares, settled_at, id).
 */
function settledIntents(vaultId: string, from: Date | undefined, to: Date): SQL {
  const fromCycles = from === undefined ? sql`true` : sql`c.finished_at >= ${isoOf(from)}::timestamptz`
  const fromInstant = from === undefined ? sql`true` : sql`i.settled_at >= ${isoOf(from)}::timestamptz`
  return sql`(select i.org_id, i.account_id, i.kind, i.shares, i.settled_at, i.id
        from vault_cycles c join vault_intents i on i.cycle_id = c.id and i.state = 'settled'
        where c.vault_id = ${vaultId} and c.state = 'settled' and ${fromCycles} and c.finished_at < ${isoOf(to)}::timestamptz
      union all
      select i.org_id, i.account_id, i.kind, i.shares, i.settled_at, i.id
        from vault_intents i
        where i.vault_id = ${vaultId} and i.mode = 'instant' and i.state = 'settled' and ${fromInstant} and i.settled_at < ${isoOf(to)}::timestamptz)`
}

/**
 * Each account's shares of a vault at an instant, from every settled intent before it (shares
 * change only when an intent settles): minted by deposits, burnt by redemptions. Summed from the
 * intents rather than carried from the previous day's rows, so an intent that committed after
 * its day was computed still counts from the next day on. Accounts holding none are left out.
 */
export async function sharesAt(executor: Executor, vaultId: string, at: Date): Promise<Array<{ orgId: string; accountId: string; shares: bigint }>> {
  const rows = await queryRows<{ org_id: string; account_id: string; shares: string }>(
    executor,
    sql`select x.org_id, x.account_id, sum(case when x.kind = 'deposit' then x.shares else -x.shares end)::text as shares
        from ${settledIntents(vaultId, undefined, at)} x
        group by x.org_id, x.account_id
        having sum(case when x.kind = 'deposit' then x.shares else -x.shares end) <> 0`,
  )
  return rows.map((row) => ({ orgId: row.org_id, accountId: row.account_id, shares: BigInt(row.shares) }))
}

/** Share changes of a vault's accounts in [from, to), oldest first. */
export async function shareChanges(executor: Executor, vaultId: string, from: Date, to: Date): Promise<Array<{ orgId: string; accountId: string; atMs: number; delta: bigint }>> {
  const rows = await queryRows<{ org_id: string; account_id: string; at_ms: string; delta: string }>(
    executor,
    sql`select x.org_id, x.account_id, (extract(epoch from x.settled_at) * 1000)::bigint::text as at_ms,
          (case when x.kind = 'deposit' then x.shares else -x.shares end)::text as delta
        from ${settledIntents(vaultId, from, to)} x
        where x.settled_at >= ${isoOf(from)}::timestamptz and x.settled_at < ${isoOf(to)}::timestamptz
        order by x.settled_at, x.id`,
  )
  return rows.map((row) => ({ orgId: row.org_id, accountId: row.account_id, atMs: Number(row.at_ms), delta: BigInt(row.delta) }))
}

/** The vault's prices recorded in (from, to], oldest first. */
export async function pricesIn(executor: Executor, vaultId: string, from: Date, to: Date): Promise<Array<{ atMs: number; price: bigint }>> {
  const rows = await executor
    .select({ at: vaultPrices.at, price: vaultPrices.price })
    .from(vaultPrices)
    .where(and(eq(vaultPrices.vaultId, vaultId), sql`${vaultPrices.at} > ${isoOf(from)}::timestamptz`, lte(vaultPrices.at, to)))
    .orderBy(asc(vaultPrices.at))
  return rows.map((row) => ({ atMs: row.at.getTime(), price: row.price }))
}

export async function lastComputedDay(executor: Executor, vaultId: string): Promise<string | undefined> {
  const [row] = await queryRows<{ day: string | null }>(executor, sql`select max(day)::text as day from vault_accrual_days where vault_id = ${vaultId}`)
  return row?.day ?? undefined
}

const ROWS_PER_STATEMENT = 5_000

/**
 * Writes a day's rows and the day's mark in one transaction. Rows already there stay as they are
 * (the key is account, vault and day), so computing a day again adds nothing.
 */
export async function insertDay(tx: Transaction, vaultId: string, day: string, rows: AccrualRecord[], computedAt: Date): Promise<void> {
  for (let start = 0; start < rows.length; start += ROWS_PER_STATEMENT) {
    await insertAccrualRows(tx, 'vault_accruals', rows.slice(start, start + ROWS_PER_STATEMENT), 'on conflict do nothing')
  }
  await tx.insert(vaultAccrualDays).values({ vaultId, day, positions: rows.length, computedAt }).onConflictDoNothing()
}

/** One multi-row insert of accrual rows from a JSON parameter (also what the benchmark's plain insert uses). */
export async function insertAccrualRows(executor: Executor, table: string, rows: AccrualRecord[], tail: string): Promise<void> {
  if (rows.length === 0) return
  const json = JSON.stringify(
    rows.map((row) => [row.orgId, row.accountId, row.vaultId, row.day, row.asset, `${row.sharesOpen}`, `${row.sharesClose}`, `${row.timeWeightedShares}`, `${row.priceOpen}`, `${row.priceClose}`, `${row.gross}`, `${row.fee}`, `${row.net}`, row.feeBps, isoOf(row.computedAt)]),
  )
  await executor.execute(
    sql`insert into ${sql.identifier(table)} (org_id, account_id, vault_id, day, asset, shares_open, shares_close, time_weighted_shares, price_open, price_close, gross, fee, net, fee_bps, computed_at)
        select r->>0, r->>1, r->>2, (r->>3)::date, r->>4, (r->>5)::numeric, (r->>6)::numeric, (r->>7)::numeric, (r->>8)::numeric, (r->>9)::numeric, (r->>10)::numeric, (r->>11)::numeric, (r->>12)::numeric, (r->>13)::integer, (r->>14)::timestamptz
        from jsonb_array_elements(${json}::jsonb) as r ${sql.raw(tail)}`,
  )
}

export interface AccrualFilter {
  orgId: string
  accountId?: string
  vaultId?: string
  from?: string
  to?: string
}

function whereOf(filter: AccrualFilter): SQL {
  const parts: SQL[] = [eq(vaultAccruals.orgId, filter.orgId)]
  if (filter.accountId !== undefined) parts.push(eq(vaultAccruals.accountId, filter.accountId))
  if (filter.vaultId !== undefined) parts.push(eq(vaultAccruals.vaultId, filter.vaultId))
  if (filter.from !== undefined) parts.push(gte(vaultAccruals.day, filter.from))
  if (filter.to !== undefined) parts.push(lte(vaultAccruals.day, filter.to))
  return and(...parts)!
}

/** An account's rows by day then vault, after a (day, vault) position. */
export async function listAccruals(executor: Executor, filter: AccrualFilter, after: { day: string; vaultId: string } | undefined, limit: number): Promise<AccrualRecord[]> {
  const where = after === undefined ? whereOf(filter) : and(whereOf(filter), sql`(${vaultAccruals.day}, ${vaultAccruals.vaultId}) > (${after.day}::date, ${after.vaultId})`)
  return executor.select().from(vaultAccruals).where(where).orderBy(asc(vaultAccruals.day), asc(vaultAccruals.vaultId)).limit(limit)
}

export interface ReportTotals {
  accountId: string
  vaultId: string
  asset: string
  days: number
  gross: bigint
  fee: bigint
  net: bigint
}

/** Sums per account and vault over the filter's days (exact numeric sums of the rows). */
export async function reportTotals(executor: Executor, filter: AccrualFilter, limit: number): Promise<ReportTotals[]> {
  const rows = await executor
    .select({
      accountId: vaultAccruals.accountId,
      vaultId: vaultAccruals.vaultId,
      asset: vaultAccruals.asset,
      days: sql<string>`count(*)::text`,
      gross: sql<string>`sum(${vaultAccruals.gross})::text`,
      fee: sql<string>`sum(${vaultAccruals.fee})::text`,
      net: sql<string>`sum(${vaultAccruals.net})::text`,
    })
    .from(vaultAccruals)
    .where(whereOf(filter))
    .groupBy(vaultAccruals.accountId, vaultAccruals.vaultId, vaultAccruals.asset)
    .orderBy(asc(vaultAccruals.accountId), asc(vaultAccruals.vaultId))
    .limit(limit)
  return rows.map((row) => ({ accountId: row.accountId, vaultId: row.vaultId, asset: row.asset, days: Number(row.days), gross: BigInt(row.gross), fee: BigInt(row.fee), net: BigInt(row.net) }))
}
