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

interface RawEvent {
  seq: string | bigint
  txid: string
  id: string
  org_id: string | null
  type: string
  data: Record<string, unknown> | string
  created_at: string | Date
}

function toRecord(row: RawEvent): EventRecord {
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
 * Rows of the organization's log: its own events and the platform-wide ones (org_id null).
 * Ordered by (txid, seq) and limited to transactions older than every transaction still running
 * (`pg_snapshot_xmin`), so no later read can find an event before one already served.
 */
export const VISIBLE_EVENT = sql`txid < pg_snapshot_xmin(pg_current_snapshot())`

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
