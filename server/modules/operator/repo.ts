import { and, desc, eq, sql, type SQL } from 'drizzle-orm'
import { queryRows, type Executor } from '../../../db/client.ts'
import { operatorActions, organizations, quotes, withdrawals } from '../../../db/schema/index.ts'
import { VISIBLE_EVENT } from '../events/repo.ts'
import { toRecord, type EventRecord, type RawEvent } from '../events/repo.ts'

export type OperatorActionRow = typeof operatorActions.$inferInsert
export type OperatorActionRecord = typeof operatorActions.$inferSelect
export type WithdrawalRecord = typeof withdrawals.$inferSelect
export type QuoteRecord = typeof quotes.$inferSelect

export async function insertAction(executor: Executor, row: OperatorActionRow): Promise<void> {
  await executor.insert(operatorActions).values(row)
}

export async function listActions(executor: Executor, filter: { targetId?: string; limit: number }): Promise<OperatorActionRecord[]> {
  const query = executor.select().from(operatorActions)
  const where = filter.targetId === undefined ? undefined : eq(operatorActions.targetId, filter.targetId)
  return query.where(where).orderBy(desc(operatorActions.id)).limit(filter.limit)
}

/** Withdrawals waiting for a second approval in every organization, newest first, with their organization's name. */
export async function pendingApprovals(executor: Executor, limit: number): Promise<Array<{ withdrawal: WithdrawalRecord; orgName: string }>> {
  const rows = await executor
    .select({ withdrawal: withdrawals, orgName: organizations.name })
    .from(withdrawals)
    .innerJoin(organizations, eq(organizations.id, withdrawals.orgId))
    .where(eq(withdrawals.state, 'pending_approval'))
    .orderBy(desc(withdrawals.id))
    .limit(limit)
  return rows
}

export async function findWithdrawalAnyOrg(executor: Executor, id: string): Promise<{ withdrawal: WithdrawalRecord; orgName: string } | undefined> {
  const [row] = await executor
    .select({ withdrawal: withdrawals, orgName: organizations.name })
    .from(withdrawals)
    .innerJoin(organizations, eq(organizations.id, withdrawals.orgId))
    .where(eq(withdrawals.id, id))
  return row
}

export async function findQuoteAnyOrg(executor: Executor, orgId: string, id: string): Promise<QuoteRecord | undefined> {
  const [row] = await executor.select().from(quotes).where(and(eq(quotes.orgId, orgId), eq(quotes.id, id)))
  return row
}

/** A position in the event log: (txid, seq), see migration 0007. */
export interface LogPosition {
  txid: string
  seq: string
}

/** An event of the stream: the event log's own record (`events/repo.ts`). */
export type StreamEventRecord = EventRecord

/** What a tail follows: exact types, namespaces (`treasury` for `treasury.*`) and one organization. */
export interface StreamFilter {
  types: string[]
  namespaces: string[]
  orgId?: string
}

function filterConditions(filter: StreamFilter): SQL[] {
  const conditions: SQL[] = [VISIBLE_EVENT]
  if (filter.orgId !== undefined) conditions.push(sql`org_id = ${filter.orgId}`)
  const typeMatches: SQL[] = [
    ...filter.types.map((type) => sql`type = ${type}`),
    ...filter.namespaces.map((namespace) => sql`starts_with(type, ${`${namespace}.`})`),
  ]
  if (typeMatches.length > 0) conditions.push(sql`(${sql.join(typeMatches, sql` or `)})`)
  return conditions
}

const COLUMNS = sql`seq::text as seq, txid::text as txid, id, org_id, type, data, created_at`

/** Events after `after` that match, in log order; only events of finished transactions. */
export async function eventsAfter(executor: Executor, after: LogPosition, filter: StreamFilter, limit: number): Promise<StreamEventRecord[]> {
  const conditions = [...filterConditions(filter), sql`(txid, seq) > (${after.txid}::xid8, ${after.seq}::bigint)`]
  const rows = await queryRows<RawEvent>(
    executor,
    sql`select ${COLUMNS} from events where ${sql.join(conditions, sql` and `)} order by events.txid, events.seq limit ${limit}`,
  )
  return rows.map(toRecord)
}

/** The last `limit` matching events at or before `until`, in log order. */
export async function eventsUntil(executor: Executor, until: LogPosition, filter: StreamFilter, limit: number): Promise<StreamEventRecord[]> {
  const conditions = [...filterConditions(filter), sql`(txid, seq) <= (${until.txid}::xid8, ${until.seq}::bigint)`]
  const rows = await queryRows<RawEvent>(
    executor,
    sql`select ${COLUMNS} from events where ${sql.join(conditions, sql` and `)} order by events.txid desc, events.seq desc limit ${limit}`,
  )
  return rows.map(toRecord).reverse()
}

/** The position of the newest event served so far (of finished transactions), or the start of the log. */
export async function endOfLog(executor: Executor): Promise<LogPosition> {
  const [row] = await queryRows<{ txid: string; seq: string }>(
    executor,
    sql`select txid::text as txid, seq::text as seq from events where ${VISIBLE_EVENT} order by events.txid desc, events.seq desc limit 1`,
  )
  return row ?? { txid: '0', seq: '0' }
}

export async function positionOf(executor: Executor, eventId: string): Promise<LogPosition | undefined> {
  const [row] = await queryRows<{ txid: string; seq: string }>(executor, sql`select txid::text as txid, seq::text as seq from events where id = ${eventId}`)
  return row
}
