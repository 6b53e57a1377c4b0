import { boolean, index, integer, jsonb, numeric, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * An organization's business day: the time zone and the hour its dates are cut at (0 is midnight
 * at the end of the date). No row means UTC, 00:00. Read by the sealer for dates not sealed yet.
 */
export const businessDays = pgTable('business_days', {
  orgId: text('org_id').primaryKey(),
  timeZone: text('time_zone').notNull(),
  cutoffHour: integer('cutoff_hour').notNull(),
  updatedAt: at('updated_at').notNull(),
})

/**
 * A sealed daily statement of one account in one asset. `body` is the exact canonical JSON that
 * was hashed and signed (jsonb would reorder its keys); the other columns are copies of its fields
 * for lookups. Append-only: the database refuses UPDATE, DELETE and TRUNCATE (migration 0040).
 */
export const statements = pgTable(
  'statements',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    asset: text('asset').notNull(),
    businessDate: text('business_date').notNull(),
    periodStart: at('period_start').notNull(),
    periodEnd: at('period_end').notNull(),
    closingBalance: money('closing_balance').notNull(),
    lineCount: integer('line_count').notNull(),
    invariantOk: boolean('invariant_ok').notNull(),
    previousHash: text('previous_hash'),
    hash: text('hash').notNull(),
    keyId: text('key_id').notNull(),
    signature: text('signature').notNull(),
    body: text('body').notNull(),
    sealedAt: at('sealed_at').notNull(),
  },
  (table) => [uniqueIndex('statements_account_date_idx').on(table.orgId, table.accountId, table.asset, table.businessDate)],
)

/** One row per organization and sealed business date, written in the commit that seals its statements. Append-only. */
export const statementDays = pgTable(
  'statement_days',
  {
    orgId: text('org_id').notNull(),
    businessDate: text('business_date').notNull(),
    periodStart: at('period_start').notNull(),
    periodEnd: at('period_end').notNull(),
    timeZone: text('time_zone').notNull(),
    cutoffHour: integer('cutoff_hour').notNull(),
    statements: integer('statements').notNull(),
    sealedAt: at('sealed_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.businessDate] })],
)

/**
 * The platform's statement signing keys (Ed25519). The newest signs; every key stays, so that
 * statements signed before a rotation keep verifying against the JWKS. Append-only.
 */
export const statementSigningKeys = pgTable(
  'statement_signing_keys',
  {
    kid: text('kid').primaryKey(),
    publicJwk: jsonb('public_jwk').notNull(),
    privateJwk: jsonb('private_jwk').notNull(),
    createdAt: at('created_at').notNull(),
  },
  (table) => [index('statement_signing_keys_created_idx').on(table.createdAt)],
)


