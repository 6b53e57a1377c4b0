import { sql } from 'drizzle-orm'
import { index, integer, numeric, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * A transfer observed arriving on chain. The same arrival (network, transaction hash, receiving
 * address) is one row however often it is observed, so it is credited once. `disposition` says
 * where its money goes: `deposit` (an account's deposit), or `suspense` (matched nothing) until an
 * operator `assigned` it to an account or `returned` it.
 */
export const chainArrivals = pgTable(
  'chain_arrivals',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    network: text('network', { enum: ['sui', 'tron'] }).notNull(),
    asset: text('asset').notNull(),
    address: text('address').notNull(),
    amount: money('amount').notNull(),
    txHash: text('tx_hash').notNull(),
    /** Tron block or Sui checkpoint that included the transfer. */
    block: text('block').notNull(),
    state: text('state', { enum: ['confirming', 'final'] }).notNull(),
    disposition: text('disposition', { enum: ['deposit', 'suspense', 'assigned', 'returned'] }).notNull(),
    accountId: text('account_id'),
    depositId: text('deposit_id'),
    depositAddressId: text('deposit_address_id'),
    /** The organization's clock when the arrival was observed, and when it reaches finality. */
    observedAt: at('observed_at').notNull(),
    finalAt: at('final_at').notNull(),
    finalizedAt: at('finalized_at'),
    /** When an operator assigned or returned a suspense arrival, and why. */
    resolvedAt: at('resolved_at'),
    resolutionNote: text('resolution_note'),
  },
  (table) => [
    uniqueIndex('chain_arrivals_observation_key').on(table.network, table.txHash, table.address),
    index('chain_arrivals_org_idx').on(table.orgId, table.id),
    index('chain_arrivals_confirming_idx').on(table.state).where(sql`${table.state} = 'confirming'`),
  ],
)

/**
 * The sandbox chain simulator's record of a withdrawal it was asked to send. Durable, so a restart
 * loses nothing: outcomes not yet acknowledged by the listener are delivered again.
 */
export const chainWithdrawals = pgTable(
  'chain_withdrawals',
  {
    withdrawalId: text('withdrawal_id').primaryKey(),
    orgId: text('org_id').notNull(),
    network: text('network', { enum: ['sui', 'tron'] }).notNull(),
    asset: text('asset').notNull(),
    toAddress: text('to_address').notNull(),
    amount: money('amount').notNull(),
    txHash: text('tx_hash').notNull(),
    block: text('block').notNull(),
    confirmationsRequired: integer('confirmations_required').notNull(),
    state: text('state', { enum: ['submitted', 'completed', 'failed'] }).notNull(),
    /** Set by the sandbox fail route before finality: the withdrawal fails instead of completing. */
    failureReason: text('failure_reason'),
    submittedAt: at('submitted_at').notNull(),
    finalAt: at('final_at').notNull(),
    settledAt: at('settled_at'),
    /** When the outcome listener finished with the outcome; until then it is delivered again. */
    acknowledgedAt: at('acknowledged_at'),
  },
  (table) => [index('chain_withdrawals_open_idx').on(table.state, table.acknowledgedAt), index('chain_withdrawals_org_idx').on(table.orgId, table.state)],
)
