import { sql } from 'drizzle-orm'
import { index, numeric, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * A card-style payment authorization. States: `authorized` (its hold is pending) moves once to
 * `captured`, `voided` or `lapsed` (uncaptured after 24 h); `declined` is terminal from the start. Declines are recorded
 * too, with the issuer-like `failure_code`.
 *
 * A row with `hold_id` set is also the ledger's record of its reservation (the amount from the
 * account's available to its held; `server/ledger/journal.ts`): no movement row is written for it.
 * A trigger (migration 0013) refuses changing its id, organization, account, asset, amount or hold,
 * and deleting it.
 */
export const payments = pgTable(
  'payments',
  {
    id: text('id').notNull(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    asset: text('asset').notNull(),
    /** Minor units; null only when the asset is unsupported (its decimals are unknown). */
    amount: money('amount'),
    /** The amount exactly as the request gave it. */
    requestedAmount: text('requested_amount').notNull(),
    state: text('state', { enum: ['authorized', 'declined', 'captured', 'voided', 'lapsed'] }).notNull(),
    failureCode: text('failure_code'),
    holdId: text('hold_id'),
    capturedAmount: money('captured_amount'),
    merchantName: text('merchant_name'),
    merchantMcc: text('merchant_mcc'),
    description: text('description'),
    expiresAt: at('expires_at'),
    createdAt: at('created_at').notNull(),
    closedAt: at('closed_at'),
  },
  // A payment is always read within its organization: by (org, id), or an organization's payments
  // in id order. The key (org_id, id) serves both, so no other index on the organization is kept
  // (every authorization writes an entry into each index here). Ids stay unique across
  // organizations by construction (`newId`: a UUIDv7, its time and random bits).
  // Only authorized payments are looked up by state (at start), so only they are in that index: a
  // decline, capture, void or lapse writes no entry into it.
  (table) => [
    primaryKey({ name: 'payments_pkey', columns: [table.orgId, table.id] }),
    index('payments_account_idx').on(table.orgId, table.accountId, table.id),
    index('payments_authorized_idx').on(table.state).where(sql`${table.state} = 'authorized'`),
  ],
)
