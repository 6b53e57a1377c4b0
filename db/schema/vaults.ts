import { sql } from 'drizzle-orm'
import { bigint, check, index, integer, numeric, pgTable, primaryKey, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * The vault catalog: platform-wide, managed by operators. Amounts are minor units of `asset`;
 * shares have the asset's decimals; prices are fixed point with 18 decimals (asset per share).
 */
export const vaults = pgTable(
  'vaults',
  {
    id: text('id').primaryKey(),
    name: text('name').notNull(),
    asset: text('asset').notNull(),
    state: text('state', { enum: ['active', 'paused'] }).notNull(),
    minSubscription: money('min_subscription').notNull(),
    minRedemption: money('min_redemption').notNull(),
    /** Seconds between automatic closes of the deposit (redeem) cycle; null: operators close them. */
    depositCycleSeconds: integer('deposit_cycle_seconds'),
    redeemCycleSeconds: integer('redeem_cycle_seconds'),
    instantFeeBps: integer('instant_fee_bps').notNull(),
    subscriptionFeeBps: integer('subscription_fee_bps').notNull(),
    platformFeeBps: integer('platform_fee_bps').notNull(),
    payoutMode: text('payout_mode', { enum: ['direct', 'claimable'] }).notNull(),
    priceMaxAgeSeconds: integer('price_max_age_seconds').notNull(),
    /** What instant redemptions may still pay out, in minor units of the asset. */
    instantBuffer: money('instant_buffer').notNull(),
    initialPrice: money('initial_price').notNull(),
    createdAt: at('created_at').notNull(),
    updatedAt: at('updated_at').notNull(),
  },
  (table) => [check('vaults_instant_buffer_nonnegative', sql`${table.instantBuffer} >= 0`)],
)

/** Prices the venue reported, one row per sync or operator change; the newest is the current price. */
export const vaultPrices = pgTable(
  'vault_prices',
  {
    vaultId: text('vault_id').notNull(),
    at: at('at').notNull(),
    price: money('price').notNull(),
    source: text('source', { enum: ['sync', 'operator', 'settlement'] }).notNull(),
  },
  (table) => [primaryKey({ columns: [table.vaultId, table.at] })],
)

/** The sandbox venue's state per vault: the NAV set at `navAt`, grown daily by `dailyRatePpb`. */
export const sandboxVenueNavs = pgTable('sandbox_venue_navs', {
  vaultId: text('vault_id').primaryKey(),
  nav: money('nav').notNull(),
  navAt: at('nav_at').notNull(),
  /** Daily growth in parts per billion (compounded once per whole day elapsed). */
  dailyRatePpb: bigint('daily_rate_ppb', { mode: 'bigint' }).notNull(),
})

/** The vaults' own clock offset (platform-wide, moved ahead by operators in sandbox). */
export const vaultClock = pgTable('vault_clock', {
  id: text('id').primaryKey(),
  offsetMs: bigint('offset_ms', { mode: 'number' }).notNull(),
})

export const vaultCycles = pgTable(
  'vault_cycles',
  {
    id: text('id').primaryKey(),
    vaultId: text('vault_id').notNull(),
    kind: text('kind', { enum: ['deposit', 'redeem'] }).notNull(),
    number: integer('number').notNull(),
    state: text('state', { enum: ['open', 'closed', 'settled', 'rolled_back'] }).notNull(),
    openedAt: at('opened_at').notNull(),
    closedAt: at('closed_at'),
    finishedAt: at('finished_at'),
    price: money('price'),
    /** Deposit cycles: amounts paid in and shares minted; redeem cycles: shares burnt, proceeds and fees. */
    totalAmount: money('total_amount'),
    totalShares: money('total_shares'),
    fee: money('fee'),
    intents: integer('intents'),
    /**
     * In cluster mode, what was decided for a closed cycle before its organizations' parts are
     * carried out by their owners: settle (at `resolutionPrice`, with the venue's digest) or roll back.
     */
    resolution: text('resolution', { enum: ['settle', 'rollback'] }),
    resolutionPrice: money('resolution_price'),
    resolutionDigest: text('resolution_digest'),
  },
  (table) => [
    uniqueIndex('vault_cycles_number_idx').on(table.vaultId, table.kind, table.number),
    index('vault_cycles_state_idx').on(table.state, table.vaultId),
  ],
)

/** Deposit intents (subscriptions) and redemptions, one row each, moved through their states in place. */
export const vaultIntents = pgTable(
  'vault_intents',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    vaultId: text('vault_id').notNull(),
    kind: text('kind', { enum: ['deposit', 'redeem'] }).notNull(),
    mode: text('mode', { enum: ['cycle', 'instant'] }).notNull(),
    cycleId: text('cycle_id'),
    recordId: text('record_id').notNull(),
    state: text('state', { enum: ['confirmed', 'settled', 'cancelled'] }).notNull(),
    reason: text('reason', { enum: ['cancelled', 'rollback'] }),
    /** Deposit: net amount in the cycle; redeem: proceeds once settled. */
    amount: money('amount'),
    fee: money('fee').notNull(),
    shares: money('shares'),
    payout: text('payout', { enum: ['direct', 'claimable'] }),
    claimedAt: at('claimed_at'),
    quoteId: text('quote_id'),
    createdAt: at('created_at').notNull(),
    settledAt: at('settled_at'),
  },
  (table) => [
    uniqueIndex('vault_intents_record_idx').on(table.orgId, table.recordId),
    index('vault_intents_cycle_idx').on(table.cycleId, table.state),
    index('vault_intents_account_idx').on(table.orgId, table.accountId, table.id),
  ],
)
