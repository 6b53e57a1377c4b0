import { sql } from 'drizzle-orm'
import { index, integer, numeric, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const money = (name: string) => numeric(name, { precision: 38, scale: 0, mode: 'bigint' })
const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * An account's address on one rail. One active address per (account, asset, network); a retired
 * one is still watched forever and its arrivals still credit the account. `derivation_index` is
 * the last part of the derivation path (it grows when an address is retired and replaced).
 */
export const depositAddresses = pgTable(
  'deposit_addresses',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    asset: text('asset').notNull(),
    network: text('network', { enum: ['sui', 'tron'] }).notNull(),
    address: text('address').notNull(),
    derivationIndex: integer('derivation_index').notNull(),
    state: text('state', { enum: ['active', 'retired'] }).notNull(),
    createdAt: at('created_at').notNull(),
    retiredAt: at('retired_at'),
  },
  (table) => [
    uniqueIndex('deposit_addresses_address_key').on(table.network, table.address),
    uniqueIndex('deposit_addresses_one_active_key').on(table.orgId, table.accountId, table.asset, table.network).where(sql`${table.state} = 'active'`),
    uniqueIndex('deposit_addresses_index_key').on(table.orgId, table.accountId, table.asset, table.network, table.derivationIndex),
  ],
)

/**
 * A deposit into an account: declared (`POST /v1/deposits`, with an expected amount) or created by
 * an arrival at a deposit address, or by an operator assigning a suspense arrival. States:
 * `awaiting_funds` (declared, nothing arrived) → `confirming` (arrived, in flight) → `completed`
 * (final, available); a declared deposit nothing arrived for by its expiry is `expired`.
 */
export const deposits = pgTable(
  'deposits',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull(),
    accountId: text('account_id').notNull(),
    asset: text('asset').notNull(),
    network: text('network', { enum: ['sui', 'tron'] }).notNull(),
    source: text('source', { enum: ['declared', 'deposit_address', 'suspense_assignment'] }).notNull(),
    state: text('state', { enum: ['awaiting_funds', 'confirming', 'completed', 'expired'] }).notNull(),
    expectedAmount: money('expected_amount'),
    receivedAmount: money('received_amount'),
    amountMatch: text('amount_match', { enum: ['exact', 'under', 'over'] }),
    depositAddressId: text('deposit_address_id'),
    address: text('address').notNull(),
    arrivalId: text('arrival_id'),
    txHash: text('tx_hash'),
    expiresAt: at('expires_at'),
    createdAt: at('created_at').notNull(),
    arrivedAt: at('arrived_at'),
    completedAt: at('completed_at'),
  },
  (table) => [
    index('deposits_org_idx').on(table.orgId, table.id),
    index('deposits_account_idx').on(table.orgId, table.accountId, table.id),
    index('deposits_awaiting_idx').on(table.address, table.state).where(sql`${table.state} = 'awaiting_funds'`),
  ],
)
