import { and, asc, eq, inArray, sql } from 'drizzle-orm'
import { queryRows, type Executor, type Transaction } from '../../../db/client.ts'
import { accounts, vaultCycles, vaultIntents } from '../../../db/schema/index.ts'
import { isoOf } from '../../lib/time.ts'
import type { CycleRecord } from '../vaults/repo.ts'

export type IntentRecord = typeof vaultIntents.$inferSelect
export type IntentWithAccount = IntentRecord & { externalId: string }

const money = (value: bigint | null | undefined) => (value === null || value === undefined ? null : value.toString())

/**
 * Inserts a new intent only while its cycle is open, on the ledger's transaction (a guarded write):
 * the cycle row is locked for share, so a close waits for it, and an intent whose cycle closed
 * first is refused. Answers whether it was written.
 */
export async function insertIntentInOpenCycle(tx: Transaction, row: IntentRecord): Promise<boolean> {
  const rows = await queryRows<{ id: string }>(
    tx,
    sql`insert into vault_intents (id, org_id, account_id, vault_id, kind, mode, cycle_id, record_id, state, reason, amount, fee, shares, payout, claimed_at, quote_id, created_at, settled_at)
        select ${row.id}, ${row.orgId}, ${row.accountId}, ${row.vaultId}, ${row.kind}, ${row.mode}, ${row.cycleId}, ${row.recordId}, ${row.state}, null,
          ${money(row.amount)}::numeric, ${money(row.fee)}::numeric, ${money(row.shares)}::numeric, ${row.payout}, null, ${row.quoteId}, ${isoOf(row.createdAt)}::timestamptz, ${row.settledAt === null ? null : isoOf(row.settledAt)}::timestamptz
        where exists (select 1 from vault_cycles c where c.id = ${row.cycleId} and c.state = 'open' for share)
        returning id`,
  )
  return rows.length === 1
}

/** An instant redemption's row: no cycle, settled at once. */
export async function insertIntent(tx: Transaction, row: IntentRecord): Promise<boolean> {
  await tx.insert(vaultIntents).values(row)
  return true
}

/** Cancels a confirmed deposit intent while its cycle is open (a guarded write). */
export async function cancelIntentInOpenCycle(tx: Transaction, intentId: string): Promise<boolean> {
  const rows = await queryRows<{ id: string }>(
    tx,
    sql`update vault_intents i set state = 'cancelled', reason = 'cancelled'
        where i.id = ${intentId} and i.state = 'confirmed'
          and exists (select 1 from vault_cycles c where c.id = i.cycle_id and c.state = 'open' for share)
        returning i.id`,
  )
  return rows.length === 1
}

export async function findIntent(executor: Executor, orgId: string, id: string): Promise<IntentRecord | undefined> {
  const [row] = await executor.select().from(vaultIntents).where(and(eq(vaultIntents.orgId, orgId), eq(vaultIntents.id, id)))
  return row
}

export async function findIntentByRecord(executor: Executor, orgId: string, recordId: string): Promise<IntentRecord | undefined> {
  const [row] = await executor.select().from(vaultIntents).where(and(eq(vaultIntents.orgId, orgId), eq(vaultIntents.recordId, recordId)))
  return row
}

/** The confirmed intents of a cycle with their accounts' external ids, oldest first. */
export async function confirmedIntents(executor: Executor, cycleId: string, orgId?: string): Promise<IntentWithAccount[]> {
  return executor
    .select({ intent: vaultIntents, externalId: accounts.externalId })
    .from(vaultIntents)
    .innerJoin(accounts, eq(accounts.id, vaultIntents.accountId))
    .where(and(eq(vaultIntents.cycleId, cycleId), eq(vaultIntents.state, 'confirmed'), orgId === undefined ? undefined : eq(vaultIntents.orgId, orgId)))
    .orderBy(asc(vaultIntents.id))
    .then((rows) => rows.map((row) => ({ ...row.intent, externalId: row.externalId })))
}

/** Settled redemptions of an account in a vault whose proceeds wait to be claimed. */
export async function claimableIntents(executor: Executor, orgId: string, accountId: string, vaultId: string): Promise<IntentRecord[]> {
  return executor
    .select()
    .from(vaultIntents)
    .where(
      and(
        eq(vaultIntents.orgId, orgId),
        eq(vaultIntents.accountId, accountId),
        eq(vaultIntents.vaultId, vaultId),
        eq(vaultIntents.kind, 'redeem'),
        eq(vaultIntents.state, 'settled'),
        eq(vaultIntents.payout, 'claimable'),
        sql`${vaultIntents.claimedAt} is null`,
      ),
    )
    .orderBy(asc(vaultIntents.id))
}

/** Marks exactly these claimable intents claimed (a guarded write): false if any was claimed meanwhile. */
export async function markClaimed(tx: Executor, ids: string[], at: Date): Promise<boolean> {
  const rows = await tx
    .update(vaultIntents)
    .set({ claimedAt: at })
    .where(and(inArray(vaultIntents.id, ids), sql`${vaultIntents.claimedAt} is null`, eq(vaultIntents.payout, 'claimable')))
    .returning({ id: vaultIntents.id })
  return rows.length === ids.length
}

export async function listIntents(executor: Executor, orgId: string, kind: IntentRecord['kind'], accountId: string | undefined, limit: number): Promise<IntentRecord[]> {
  const where = accountId === undefined ? and(eq(vaultIntents.orgId, orgId), eq(vaultIntents.kind, kind)) : and(eq(vaultIntents.orgId, orgId), eq(vaultIntents.kind, kind), eq(vaultIntents.accountId, accountId))
  return executor.select().from(vaultIntents).where(where).orderBy(asc(vaultIntents.id)).limit(limit)
}

const INTENT_UPDATES_PER_STATEMENT = 5000

/** What a finished cycle records: its state, price and totals. */
export interface CycleOutcome {
  state: 'settled' | 'rolled_back'
  finishedAt: Date
  price: bigint | null
  totalAmount: bigint
  totalShares: bigint
  fee: bigint
}

/**
 * Moves a closed cycle to its outcome and its confirmed intents with it, as one guarded write:
 * false when the cycle is no longer closed (settled or rolled back already). Each intent row is
 * given as data (`updates`): settled ones with shares, amount and payout; rolled-back ones cancelled.
 */
export async function finishCycle(tx: Transaction, cycleId: string, outcome: CycleOutcome, updates: IntentUpdate[]): Promise<boolean> {
  if (!(await markFinished(tx, cycleId, outcome, updates.length))) return false
  // Every intent read when the cycle was closed must move now; anything else is a bug, and failing
  // here rolls the whole settlement back.
  const moved = await moveIntents(tx, cycleId, updates, outcome.finishedAt)
  if (moved !== updates.length) throw new Error(`cycle ${cycleId}: ${moved} of ${updates.length} intents moved`)
  return true
}

/** The cycle's row alone moved to its outcome, if it is still closed (a cluster's settlement, after every organization's part). */
export async function markFinished(tx: Transaction, cycleId: string, outcome: CycleOutcome, intents: number): Promise<boolean> {
  const [cycle] = await tx
    .update(vaultCycles)
    .set({ state: outcome.state, finishedAt: outcome.finishedAt, price: outcome.price, totalAmount: outcome.totalAmount, totalShares: outcome.totalShares, fee: outcome.fee, intents })
    .where(and(eq(vaultCycles.id, cycleId), eq(vaultCycles.state, 'closed')))
    .returning({ id: vaultCycles.id })
  return cycle !== undefined
}

/**
 * Moves intents of a cycle that are still confirmed as `updates` says, in slices (so no one
 * statement, and no one step of this thread building it, grows with the cycle); answers how many moved.
 */
export async function moveIntents(tx: Transaction, cycleId: string, updates: IntentUpdate[], at: Date): Promise<number> {
  let moved = 0
  for (let from = 0; from < updates.length; from += INTENT_UPDATES_PER_STATEMENT) {
    const slice = updates.slice(from, from + INTENT_UPDATES_PER_STATEMENT)
    const rows = await queryRows<{ count: string }>(
      tx,
      sql`with x as (select * from jsonb_to_recordset(${JSON.stringify(slice)}::jsonb) as x(id text, state text, reason text, amount numeric, shares numeric, payout text)),
          u as (update vault_intents i set state = x.state, reason = x.reason, amount = coalesce(x.amount, i.amount), shares = coalesce(x.shares, i.shares),
                  payout = coalesce(x.payout, i.payout), settled_at = case when x.state = 'settled' then ${isoOf(at)}::timestamptz else null end
                from x where i.id = x.id and i.state = 'confirmed' and i.cycle_id = ${cycleId} returning 1)
          select count(*)::text as count from u`,
    )
    moved += Number(rows[0]?.count)
  }
  return moved
}

/** The organizations with intents still confirmed in a cycle (the parts of a cluster's settlement left to carry out). */
export async function orgsWithConfirmedIntents(executor: Executor, cycleId: string): Promise<string[]> {
  const rows = await executor
    .selectDistinct({ orgId: vaultIntents.orgId })
    .from(vaultIntents)
    .where(and(eq(vaultIntents.cycleId, cycleId), eq(vaultIntents.state, 'confirmed')))
    .orderBy(asc(vaultIntents.orgId))
  return rows.map((row) => row.orgId)
}

/**
 * The intents a resolution moved (settled, or cancelled by the roll back) with their accounts'
 * external ids: planned again at the recorded price, they give the cycle's totals.
 */
export async function resolvedIntents(executor: Executor, cycleId: string, resolution: 'settle' | 'rollback'): Promise<IntentWithAccount[]> {
  const moved = resolution === 'settle' ? eq(vaultIntents.state, 'settled') : and(eq(vaultIntents.state, 'cancelled'), eq(vaultIntents.reason, 'rollback'))
  return executor
    .select({ intent: vaultIntents, externalId: accounts.externalId })
    .from(vaultIntents)
    .innerJoin(accounts, eq(accounts.id, vaultIntents.accountId))
    .where(and(eq(vaultIntents.cycleId, cycleId), moved))
    .orderBy(asc(vaultIntents.id))
    .then((rows) => rows.map((row) => ({ ...row.intent, externalId: row.externalId })))
}

export interface IntentUpdate {
  id: string
  state: 'settled' | 'cancelled'
  reason: 'rollback' | null
  amount: string | null
  shares: string | null
  payout: 'direct' | 'claimable' | null
}

/**
 * Closes an open cycle and opens the next, in one transaction: the close takes the cycle row's
 * lock, so intents being written into it finish first and later ones are refused; the totals are
 * then read in a statement of their own, which sees every intent that got in.
 */
export async function closeCycle(tx: Transaction, cycle: CycleRecord, at: Date): Promise<{ totalAmount: bigint; totalShares: bigint; intents: number } | undefined> {
  const [closed] = await tx
    .update(vaultCycles)
    .set({ state: 'closed', closedAt: at })
    .where(and(eq(vaultCycles.id, cycle.id), eq(vaultCycles.state, 'open')))
    .returning({ id: vaultCycles.id })
  if (!closed) return undefined
  const [totals] = await queryRows<{ amount: string; shares: string; count: string }>(
    tx,
    sql`select coalesce(sum(amount), 0)::text as amount, coalesce(sum(shares), 0)::text as shares, count(*)::text as count
        from vault_intents where cycle_id = ${cycle.id} and state = 'confirmed'`,
  )
  const result = { totalAmount: BigInt(totals!.amount), totalShares: BigInt(totals!.shares), intents: Number(totals!.count) }
  await tx.update(vaultCycles).set({ totalAmount: result.totalAmount, totalShares: result.totalShares, intents: result.intents }).where(eq(vaultCycles.id, cycle.id))
  return result
}

/** Every intent of a cycle (any state) with its account's external id, oldest first, at most `limit`. */
export async function cycleIntents(executor: Executor, cycleId: string, limit: number): Promise<IntentWithAccount[]> {
  return executor
    .select({ intent: vaultIntents, externalId: accounts.externalId })
    .from(vaultIntents)
    .innerJoin(accounts, eq(accounts.id, vaultIntents.accountId))
    .where(eq(vaultIntents.cycleId, cycleId))
    .orderBy(asc(vaultIntents.id))
    .limit(limit)
    .then((rows) => rows.map((row) => ({ ...row.intent, externalId: row.externalId })))
}
