import { sql } from 'drizzle-orm'
import { bigint, bigserial, customType, index, integer, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * Postgres' 64-bit transaction id. Events carry the id of the transaction that wrote them, and the
 * log is read in that order, so a reader never passes an event whose transaction commits late.
 */
export const xid8 = customType<{ data: string; driverData: string }>({
  dataType: () => 'xid8',
})

/**
 * A partner's webhook endpoint. The signing secret must be recoverable by the delivery worker (it
 * signs every delivery with it), so unlike API keys it cannot be stored as a hash. After a rotation
 * the previous secret keeps signing, as a second `v1` entry, until `previous_secret_valid_until`.
 */
export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    url: text('url').notNull(),
    /** Exact event names, `<namespace>.*` or `*`. */
    events: text('events').array().notNull(),
    secret: text('secret').notNull(),
    previousSecret: text('previous_secret'),
    /** On the organization's clock, like every time-based rule. */
    previousSecretValidUntil: at('previous_secret_valid_until'),
    /** On the organization's clock: the endpoint receives events created from this instant on. */
    createdAt: at('created_at').notNull(),
    updatedAt: at('updated_at').notNull(),
    /** Deleted endpoints are kept so the event log can still name them in past deliveries. */
    deletedAt: at('deleted_at'),
  },
  (table) => [index('webhook_endpoints_org_idx').on(table.orgId, table.id)],
)

/**
 * One row per (event, endpoint): the outbox's fan-out. `next_attempt_at` is on the receiving
 * organization's clock; a row is due when it is at or before that clock's now. While an attempt
 * runs, `next_attempt_at` holds the end of its lease, so a process that dies mid-attempt leaves a
 * row that becomes due again by itself (at-least-once).
 */
export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    eventId: text('event_id').notNull(),
    webhookId: text('webhook_id').notNull(),
    /** The organization that owns the endpoint (for `vault.*` events, one row per subscribed organization). */
    orgId: text('org_id').notNull(),
    status: text('status', { enum: ['pending', 'delivered', 'retrying', 'failed'] }).notNull(),
    attempts: integer('attempts').notNull().default(0),
    lastStatusCode: integer('last_status_code'),
    lastError: text('last_error'),
    lastAttemptAt: at('last_attempt_at'),
    nextAttemptAt: at('next_attempt_at'),
    createdAt: at('created_at').notNull().default(sql`now()`),
  },
  (table) => [
    uniqueIndex('webhook_deliveries_event_webhook_unique').on(table.eventId, table.webhookId),
    index('webhook_deliveries_due_idx').on(table.nextAttemptAt).where(sql`status in ('pending', 'retrying')`),
    // An endpoint's open deliveries, cancelled when it is deleted (migration 0051).
    index('webhook_deliveries_open_idx').on(table.orgId, table.webhookId).where(sql`status in ('pending', 'retrying')`),
  ],
)

/**
 * The worker's durable position in the event log: the (transaction id, seq) of the last event it
 * fanned out. One row; instances take turns under its row lock.
 */
export const webhookOutboxCursor = pgTable('webhook_outbox_cursor', {
  name: text('name').primaryKey(),
  lastTxid: xid8('last_txid').notNull(),
  lastSeq: bigint('last_seq', { mode: 'bigint' }).notNull(),
  updatedAt: at('updated_at').notNull().default(sql`now()`),
})
