import { boolean, index, jsonb, numeric, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'
import { sql } from 'drizzle-orm'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * A pre-registered withdrawal destination of one account. `registered` until its 24 h timelock on the
 * organization's clock elapses, then `active` (event `treasury.allowlist.activated`); `removed` by
 * request. An address that fails screening is never stored.
 */
export const allowlistEntries = pgTable(
  'allowlist_entries',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    network: text('network', { enum: ['sui', 'tron'] }).notNull(),
    /** Canonical form (Sui: lowercase 0x + 64 hex; Tron: base58check). */
    address: text('address').notNull(),
    label: text('label'),
    state: text('state', { enum: ['registered', 'active', 'removed'] }).notNull(),
    activatesAt: at('activates_at').notNull(),
    activatedAt: at('activated_at'),
    removedAt: at('removed_at'),
    createdAt: at('created_at').notNull(),
  },
  (table) => [
    index('allowlist_entries_account_idx').on(table.orgId, table.accountId, table.id),
    index('allowlist_entries_pending_idx').on(table.state, table.orgId),
    // One live entry per destination and account: registering it again answers the existing one.
    uniqueIndex('allowlist_entries_live_unique')
      .on(table.orgId, table.accountId, table.network, table.address)
      .where(sql`state <> 'removed'`),
  ],
)

/**
 * A withdrawal to an allowlisted destination at a quoted price. States: `pending_approval` (above the
 * organization's threshold, waiting for a second key) → `approved` (unsigned transaction built) →
 * `submitted` (broadcast) → exactly one of `confirmed` (with chain evidence) or `failed`; a pending
 * one can also end `rejected`. Money: available → in_flight at creation; in_flight leaves to the
 * chain (and the fees account) on confirmation, or back to available on failure or rejection.
 */
export const withdrawals = pgTable(
  'withdrawals',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    allowlistEntryId: text('allowlist_entry_id').notNull(),
    quoteId: text('quote_id').notNull(),
    network: text('network', { enum: ['sui', 'tron'] }).notNull(),
    asset: text('asset').notNull(),
    address: text('address').notNull(),
    /** What arrives at the destination. */
    amount: money('amount').notNull(),
    networkFee: money('network_fee').notNull(),
    serviceFee: money('service_fee').notNull(),
    totalDebited: money('total_debited').notNull(),
    state: text('state', { enum: ['pending_approval', 'approved', 'submitted', 'confirmed', 'failed', 'rejected'] }).notNull(),
    approvalRequired: boolean('approval_required').notNull(),
    /** The key that created it; it can never approve it. */
    createdByKeyId: text('created_by_key_id').notNull(),
    /** `key`, `operator` or `policy` (below the threshold, approved at creation). */
    approvedByType: text('approved_by_type', { enum: ['key', 'operator', 'policy'] }),
    approvedBy: text('approved_by'),
    approvedAt: at('approved_at'),
    rejectedByType: text('rejected_by_type', { enum: ['key', 'operator'] }),
    rejectedBy: text('rejected_by'),
    unsignedTransaction: jsonb('unsigned_transaction').$type<{ network: string; encoding: string; payload: string; digest: string }>(),
    txHash: text('tx_hash'),
    submittedAt: at('submitted_at'),
    chainEvidence: jsonb('chain_evidence').$type<{ txHash: string; network: string; block: string; confirmations: number; confirmedAt: string }>(),
    failureReason: text('failure_reason'),
    createdAt: at('created_at').notNull(),
    closedAt: at('closed_at'),
  },
  (table) => [
    index('withdrawals_org_idx').on(table.orgId, table.id),
    index('withdrawals_account_idx').on(table.orgId, table.accountId, table.id),
    index('withdrawals_state_idx').on(table.state),
    // A quote executes once: a second withdrawal on it cannot exist even across instances.
    uniqueIndex('withdrawals_quote_unique').on(table.quoteId),
  ],
)

/** An organization's approval threshold per asset: withdrawals above it wait for a second key. */
export const withdrawalApprovalThresholds = pgTable(
  'withdrawal_approval_thresholds',
  {
    orgId: text('org_id').notNull(),
    asset: text('asset').notNull(),
    threshold: money('threshold').notNull(),
    updatedAt: at('updated_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.asset] })],
)
