import { boolean, date, index, integer, numeric, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/** An account's save policy: each day, what its available balance holds above `buffer` goes into `vaultId`. */
export const savePolicies = pgTable(
  'save_policies',
  {
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    vaultId: text('vault_id').notNull(),
    /** Minor units of the vault's asset kept available. */
    buffer: money('buffer').notNull(),
    enabled: boolean('enabled').notNull(),
    createdAt: at('created_at').notNull(),
    updatedAt: at('updated_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.accountId] }), index('save_policies_enabled_idx').on(table.enabled, table.orgId)],
)

/**
 * One row per account and day (the organization's UTC date) on which its policy ran, written in
 * the same transaction as what the run did: its primary key is what makes a policy run once a day.
 */
export const savePolicyRuns = pgTable(
  'save_policy_runs',
  {
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    day: date('day', { mode: 'string' }).notNull(),
    vaultId: text('vault_id').notNull(),
    outcome: text('outcome', { enum: ['subscribed', 'skipped', 'nothing_to_invest'] }).notNull(),
    reason: text('reason'),
    amount: money('amount'),
    intentId: text('intent_id'),
    createdAt: at('created_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.accountId, table.day] })],
)

/**
 * One accrual per account, vault and day (UTC, on the vaults' clock). Amounts are minor units of
 * the vault's asset, shares minor units of its shares, prices fixed point (18 decimals).
 * `net = gross - fee` holds in the database.
 */
export const vaultAccruals = pgTable(
  'vault_accruals',
  {
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    vaultId: text('vault_id').notNull(),
    day: date('day', { mode: 'string' }).notNull(),
    asset: text('asset').notNull(),
    sharesOpen: money('shares_open').notNull(),
    sharesClose: money('shares_close').notNull(),
    timeWeightedShares: money('time_weighted_shares').notNull(),
    priceOpen: money('price_open').notNull(),
    priceClose: money('price_close').notNull(),
    gross: money('gross').notNull(),
    fee: money('fee').notNull(),
    net: money('net').notNull(),
    feeBps: integer('fee_bps').notNull(),
    computedAt: at('computed_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.orgId, table.accountId, table.vaultId, table.day] }), index('vault_accruals_day_idx').on(table.orgId, table.day)],
)

/** The days whose accruals are computed, per vault: written with the day's rows, read to find the next day to compute. */
export const vaultAccrualDays = pgTable(
  'vault_accrual_days',
  {
    vaultId: text('vault_id').notNull(),
    day: date('day', { mode: 'string' }).notNull(),
    positions: integer('positions').notNull(),
    computedAt: at('computed_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.vaultId, table.day] })],
)
