import { bigint, bigserial, index, integer, jsonb, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const createdAt = () => timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow()

export const organizations = pgTable('organizations', {
  id: text('id').primaryKey(),
  name: text('name').notNull(),
  /** Raised per-minute limit for this organization's secret and test keys; null means the contract's default. */
  rateLimitPerMinute: integer('rate_limit_per_minute'),
  /**
   * Raised by one with every change of the limit, so an instance's cache keeps the newest of the
   * rows it reads, whatever order their reads answer in.
   */
  limitsVersion: bigint('limits_version', { mode: 'number' }).notNull().default(0),
  onboardingChecklist: jsonb('onboarding_checklist').$type<Record<string, boolean>>().notNull(),
  signedOffAt: timestamp('signed_off_at', { withTimezone: true, mode: 'date' }),
  signedOffBy: text('signed_off_by'),
  createdAt: createdAt(),
})

export const apiKeys = pgTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull().references(() => organizations.id),
    type: text('type', { enum: ['secret', 'publishable', 'test'] }).notNull(),
    environment: text('environment', { enum: ['sandbox', 'production'] }).notNull(),
    /** SHA-256 of the whole key, hex. The key itself is never stored. */
    keyHash: text('key_hash').notNull(),
    /** The last four characters, so an operator can tell keys apart. */
    lastFour: text('last_four').notNull(),
    createdAt: createdAt(),
    /** Set at rotation: the key keeps working until this instant, then stops. */
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }),
    revokedAt: timestamp('revoked_at', { withTimezone: true, mode: 'date' }),
    replacedByKeyId: text('replaced_by_key_id'),
  },
  (table) => [uniqueIndex('api_keys_key_hash_unique').on(table.keyHash), index('api_keys_org_idx').on(table.orgId)],
)

/** Sandbox test clocks: how far each organization's clock runs ahead of the wall clock. */
export const orgClocks = pgTable('org_clocks', {
  orgId: text('org_id').primaryKey().references(() => organizations.id),
  offsetMs: bigint('offset_ms', { mode: 'number' }).notNull().default(0),
  updatedAt: timestamp('updated_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
})

export const events = pgTable(
  'events',
  {
    /** Position in the log (with `txid`, see migration 0007); the public cursor is the event id, resolved to this. */
    seq: bigserial('seq', { mode: 'bigint' }).notNull(),
    /** The key: one index serves lookups by id and refuses a second row with it (no separate index on `seq`). */
    id: text('id').primaryKey(),
    /** Null for platform-wide events (`vault.*`), which every organization sees. */
    orgId: text('org_id'),
    type: text('type').notNull(),
    data: jsonb('data').$type<Record<string, unknown>>().notNull(),
    createdAt: createdAt(),
  },
)

export const idempotencyRecords = pgTable(
  'idempotency_records',
  {
    orgId: text('org_id').notNull(),
    key: text('key').notNull(),
    method: text('method').notNull(),
    path: text('path').notNull(),
    requestHash: text('request_hash').notNull(),
    requestBody: jsonb('request_body'),
    state: text('state', { enum: ['in_progress', 'completed'] }).notNull(),
    responseStatus: integer('response_status'),
    responseBody: text('response_body'),
    createdAt: createdAt(),
    /**
     * The process that holds an in-progress claim (`Owners` in server/platform/idempotency.ts): a
     * claim whose owner is gone is taken over at once.
     */
    owner: text('owner'),
    /** An in-progress claim older than this is considered abandoned (its process died). */
    lockedUntil: timestamp('locked_until', { withTimezone: true, mode: 'date' }).notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true, mode: 'date' }).notNull(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.key] }), index('idempotency_expires_idx').on(table.expiresAt)],
)

export const rateLimitCounters = pgTable(
  'rate_limit_counters',
  {
    bucket: text('bucket').notNull(),
    windowStartMs: bigint('window_start_ms', { mode: 'number' }).notNull(),
    count: integer('count').notNull(),
  },
  (table) => [primaryKey({ columns: [table.bucket, table.windowStartMs] })],
)

