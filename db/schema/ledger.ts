import { sql } from 'drizzle-orm'
import { bigint, check, index, numeric, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * One movement of money: the unit that sums to zero per asset, with its legs. Leg i is a signed
 * amount `amounts[i]` of `assets[i]` on bucket `buckets[i]` of account `accounts[i]` (customer
 * accounts have the buckets available, held and in_flight; system accounts such as `system:fees`
 * only available). Immutable (a trigger refuses UPDATE and DELETE); a correction is a new movement.
 *
 * The legs are arrays in the movement's row rather than rows of a table of their own, the way a
 * TigerBeetle transfer carries its debit and credit in one record: an authorization's two legs as
 * rows cost Postgres two more heap tuples and four more index entries, about a quarter of its CPU
 * per authorization (`bench/batch-cost.ts`), and no query looked them up by anything but their
 * movement.
 */
export const ledgerMovements = pgTable(
  'ledger_movements',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    kind: text('kind').notNull(),
    /** The resource that caused the movement (`tr_…`, `hold_…`, a sandbox funding id). */
    reference: text('reference').notNull(),
    createdAt: at('created_at').notNull(),
    accounts: text('accounts').array().notNull(),
    buckets: text('buckets').array().notNull(),
    assets: text('assets').array().notNull(),
    amounts: numeric('amounts', { precision: 38, scale: 0 }).array().notNull(),
  },
  // By reference: the movements of a payment, transfer or hold (verify reads it to tell a payment
  // whose reservation has a movement row of its own, from before migration 0013, from one whose row
  // records it). Every movement writes an entry into each index here, so none is kept that no query
  // reads (an organization's movements in id order had one and no reader).
  (table) => [
    index('ledger_movements_reference_idx').on(table.reference),
    // An organization's movements by booking time: the statement sealer reads a day's movements
    // of every account, and those booked after a cut-off, through it (migration 0040).
    index('ledger_movements_org_created_idx').on(table.orgId, table.createdAt),
    check(
      'ledger_movements_legs',
      sql`cardinality(${table.amounts}) >= 2 and cardinality(${table.accounts}) = cardinality(${table.amounts}) and cardinality(${table.buckets}) = cardinality(${table.amounts}) and cardinality(${table.assets}) = cardinality(${table.amounts})`,
    ),
    check('ledger_movements_amounts_nonzero', sql`0 <> all(${table.amounts})`),
    check('ledger_movements_buckets', sql`${table.buckets} <@ array['available', 'held', 'in_flight']::text[]`),
  ],
)

/**
 * The balance of one ledger account in one asset. `total` is kept as its own column (changed by
 * the net of each movement) so verify can prove the contract's invariant instead of assuming it.
 * The checks make Postgres itself refuse a negative customer bucket.
 */
export const ledgerBalances = pgTable(
  'ledger_balances',
  {
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    asset: text('asset').notNull(),
    kind: text('kind', { enum: ['customer', 'system'] }).notNull(),
    available: money('available').notNull(),
    held: money('held').notNull(),
    inFlight: money('in_flight').notNull(),
    total: money('total').notNull(),
    updatedAt: at('updated_at').notNull(),
  },
  (table) => [
    primaryKey({ columns: [table.orgId, table.accountId, table.asset] }),
    check(
      'ledger_balances_customer_nonnegative',
      sql`${table.kind} <> 'customer' or (${table.available} >= 0 and ${table.held} >= 0 and ${table.inFlight} >= 0)`,
    ),
    check('ledger_balances_total', sql`${table.total} = ${table.available} + ${table.held} + ${table.inFlight}`),
  ],
)

/**
 * The group-commit writer's order guard: every batch it sends moves its row from the previous
 * sequence number to the next in the same statement, so a batch commits only if every batch the
 * writer sent before it did (see `server/ledger/writer.ts`). One row per writer generation.
 * Unlogged (made so in the migration): it matters only while its writer runs.
 */
export const ledgerWriterSequences = pgTable('ledger_writer_sequences', {
  writerId: text('writer_id').primaryKey(),
  seq: bigint('seq', { mode: 'number' }).notNull(),
  updatedAt: at('updated_at').notNull(),
})

export const holds = pgTable(
  'holds',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    asset: text('asset').notNull(),
    amount: money('amount').notNull(),
    state: text('state', { enum: ['pending', 'captured', 'released', 'expired'] }).notNull(),
    expiresAt: at('expires_at').notNull(),
    capturedAmount: money('captured_amount'),
    transferId: text('transfer_id'),
    createdAt: at('created_at').notNull(),
    closedAt: at('closed_at'),
  },
  // A hold is read by id (its organization checked on the row); only pending holds are looked up by
  // anything else (at start, and an organization's when an instance takes it over), so only they
  // are in that index, keyed by organization (migration 0051).
  (table) => [index('holds_pending_org_idx').on(table.orgId).where(sql`${table.state} = 'pending'`)],
)

export const transfers = pgTable(
  'transfers',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    sourceAccountId: text('source_account_id').notNull(),
    destinationAccountId: text('destination_account_id').notNull(),
    asset: text('asset').notNull(),
    amount: money('amount').notNull(),
    fee: money('fee').notNull(),
    feeModel: text('fee_model', { enum: ['inclusive', 'additive'] }).notNull(),
    netAmount: money('net_amount').notNull(),
    totalDebited: money('total_debited').notNull(),
    holdId: text('hold_id'),
    description: text('description'),
    state: text('state', { enum: ['completed'] }).notNull(),
    movementId: text('movement_id').notNull(),
    createdAt: at('created_at').notNull(),
  },
  (table) => [
    index('transfers_org_idx').on(table.orgId, table.id),
    index('transfers_source_idx').on(table.orgId, table.sourceAccountId, table.id),
    index('transfers_destination_idx').on(table.orgId, table.destinationAccountId, table.id),
  ],
)

export const quotes = pgTable(
  'quotes',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    kind: text('kind', { enum: ['withdrawal', 'instant_redeem'] }).notNull(),
    accountId: text('account_id').notNull(),
    /** instant_redeem: the vault and the shares quoted (amount is then the net proceeds, totalDebited their gross value). */
    vaultId: text('vault_id'),
    shares: money('shares'),
    asset: text('asset').notNull(),
    amount: money('amount').notNull(),
    networkFee: money('network_fee').notNull(),
    serviceFee: money('service_fee').notNull(),
    totalDebited: money('total_debited').notNull(),
    state: text('state', { enum: ['open', 'consumed'] }).notNull(),
    expiresAt: at('expires_at').notNull(),
    consumedAt: at('consumed_at'),
    createdAt: at('created_at').notNull(),
  },
  (table) => [index('quotes_org_idx').on(table.orgId, table.id)],
)
