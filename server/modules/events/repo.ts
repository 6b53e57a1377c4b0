import { and, eq, inArray, sql, type SQL } from 'drizzle-orm'
import { queryRows, type Executor } from '../../../db/client.ts'
import { webhookDeliveries } from '../../../db/schema/index.ts'

export interface EventRecord {
  seq: string
  txid: string
  id: string
  orgId: string | null
  type: string
  data: Record<string, unknown>
  createdAt: Date
}

/** An event row as SQL reads it (`toRecord` turns it into an `EventRecord`). */
export interface RawEvent {
  seq: string | bigint
  txid: string
  id: string
  org_id: string | null
  type: string
  data: Record<string, unknown> | string
  created_at: string | Date
}

export function toRecord(row: RawEvent): EventRecord {
  return {
    seq: String(row.seq),
    txid: String(row.txid),
    id: row.id,
    orgId: row.org_id,
    type: row.type,
    data: typeof row.data === 'string' ? (JSON.parse(row.data) as Record<string, unknown>) : row.data,
    createdAt: row.created_at instanceof Date ? row.created_at : new Date(row.created_at),
  }
}

/**
 * The visibility horizon of the log: every transaction with a smaller id has finished, and every
 * transaction still to commit has a larger one, so rows below it are final and what is served is
 * always a prefix of the final (txid, seq) order.
 *
 * It is the oldest transaction still running in this database, or the snapshot's xmax when none is.
 * `pg_snapshot_xmin` alone would do, but it is cluster-wide: a long write transaction in another
 * database on the same server would hold this log back. Transactions that `pg_stat_activity` places
 * in another database are therefore left out; any running transaction it cannot place (no
 * permission to see it, or gone from the view) counts as ours, which delays but never skips.
 */
export const VISIBILITY_HORIZON = sql`(select coalesce(
    (select min(running) from pg_snapshot_xip(pg_current_snapshot()) as running
      where (running::text::bigint % 4294967296) not in (
        select backend_xid::text::bigint from pg_stat_activity
        where datname is distinct from current_database() and backend_xid is not null)),
    pg_snapshot_xmax(pg_current_snapshot())))`

/** Rows of finished transactions only (see `VISIBILITY_HORIZON`). */
export const VISIBLE_EVENT = sql`txid < ${VISIBILITY_HORIZON}`

function inLogOf(orgId: string): SQL {
  return sql`(org_id = ${orgId} or org_id is null)`
}

export async function findEventInLog(executor: Executor, orgId: string, id: string): Promise<EventRecord | undefined> {
  const [row] = await queryRows<RawEvent>(
    executor,
    sql`select seq::text as seq, txid::text as txid, id, org_id, type, data, created_at from events where id = ${id} and ${inLogOf(orgId)}`,
  )
  return row ? toRecord(row) : undefined
}

export async function findEventById(executor: Executor, id: string): Promise<EventRecord | undefined> {
  const [row] = await queryRows<RawEvent>(executor, sql`select seq::text as seq, txid::text as txid, id, org_id, type, data, created_at from events where id = ${id}`)
  return row ? toRecord(row) : undefined
}

export async function listEventsInLog(
  executor: Executor,
  orgId: string,
  filter: { after?: { txid: string; seq: string }; types?: string[]; limit: number },
): Promise<EventRecord[]> {
  const conditions: SQL[] = [inLogOf(orgId), VISIBLE_EVENT]
  if (filter.after) conditions.push(sql`(txid, seq) > (${filter.after.txid}::xid8, ${filter.after.seq}::bigint)`)
  if (filter.types && filter.types.length > 0) conditions.push(sql`type in (${sql.join(filter.types.map((type) => sql`${type}`), sql`, `)})`)
  const rows = await queryRows<RawEvent>(
    executor,
    sql`select seq::text as seq, txid::text as txid, id, org_id, type, data, created_at from events
        where ${sql.join(conditions, sql` and `)} order by events.txid, events.seq limit ${filter.limit}`,
  )
  return rows.map(toRecord)
}

export type DeliveryRecord = typeof webhookDeliveries.$inferSelect

export async function deliveriesOf(executor: Executor, orgId: string, eventIds: string[]): Promise<DeliveryRecord[]> {
  if (eventIds.length === 0) return []
  return executor
    .select()
    .from(webhookDeliveries)
    .where(and(eq(webhookDeliveries.orgId, orgId), inArray(webhookDeliveries.eventId, eventIds)))
    .orderBy(webhookDeliveries.id)
}
