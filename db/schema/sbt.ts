import { bigint, bigserial, index, integer, jsonb, numeric, pgTable, primaryKey, smallint, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'

const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * The SBT data API's tables (server/modules/sbt). Users are keyed by their normalized Sui address;
 * the numeric id is what results, clicks and claims refer to, so the large tables stay narrow.
 */
export const sbtUsers = pgTable(
  'sbt_users',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    suiAddress: text('sui_address').notNull(),
    inviteCode: text('invite_code').notNull(),
    invitedBy: bigint('invited_by', { mode: 'number' }),
    invitedAt: at('invited_at'),
    /** Wallets the user bound (`ton`, `evm`, `sui`, `bsc`) and account names (`x`, `discord`). */
    bindings: jsonb('bindings').$type<Record<string, string>>().notNull().default({}),
    score: integer('score').notNull().default(0),
    streakDays: integer('streak_days').notNull().default(0),
    createdAt: at('created_at').notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex('sbt_users_address_idx').on(table.suiAddress),
    uniqueIndex('sbt_users_invite_code_idx').on(table.inviteCode),
    index('sbt_users_invited_by_idx').on(table.invitedBy, table.invitedAt, table.id),
  ],
)

/** Counters kept by triggers in the same transaction as the rows they count (`users`). */
export const sbtCounters = pgTable('sbt_counters', {
  name: text('name').primaryKey(),
  value: bigint('value', { mode: 'number' }).notNull(),
})

export const sbtCampaigns = pgTable('sbt_campaigns', {
  id: text('id').primaryKey(),
  name: text('name').notNull(),
  /** The campaign referral links point at; at most one (partial unique index in the migration). */
  isDefault: integer('is_default').notNull().default(0),
})

export const sbtCredentialGroups = pgTable('sbt_credential_groups', {
  id: text('id').primaryKey(),
  campaignId: text('campaign_id').notNull(),
  name: text('name').notNull(),
})

export const sbtCredentials = pgTable(
  'sbt_credentials',
  {
    id: text('id').primaryKey(),
    groupId: text('group_id').notNull(),
    name: text('name').notNull(),
    labelType: integer('label_type').notNull(),
    params: jsonb('params').$type<Record<string, unknown>>().notNull().default({}),
  },
  (table) => [index('sbt_credentials_group_idx').on(table.groupId)],
)

/** Duplicates allowed: no unique key on (user, credential), as the contract says. */
export const sbtCredentialResults = pgTable(
  'sbt_credential_results',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    credentialId: text('credential_id').notNull(),
    status: smallint('status').notNull(),
    createdAt: at('created_at').notNull().defaultNow(),
  },
  (table) => [index('sbt_results_user_credential_idx').on(table.userId, table.credentialId, table.status)],
)

export const sbtClicks = pgTable(
  'sbt_clicks',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    credentialId: text('credential_id').notNull(),
    createdAt: at('created_at').notNull().defaultNow(),
  },
  (table) => [index('sbt_clicks_user_credential_idx').on(table.userId, table.credentialId)],
)

export const sbtRewards = pgTable(
  'sbt_rewards',
  {
    sbtId: integer('sbt_id').primaryKey(),
    kind: text('kind').$type<'social' | 'referral' | 'lockdrop'>().notNull(),
    groupId: text('group_id').notNull(),
    level: integer('level').notNull(),
    title: text('title').notNull(),
    taskName: text('task_name').notNull(),
    points: integer('points').notNull(),
    invitesRequired: integer('invites_required'),
    usdRequired: numeric('usd_required'),
  },
  (table) => [index('sbt_rewards_group_idx').on(table.groupId)],
)

/** One per user and SBT: claimType 2 eligible, 3 minting, 4 claimed, 5 missed. */
export const sbtClaims = pgTable(
  'sbt_claims',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    userId: bigint('user_id', { mode: 'number' }).notNull(),
    sbtId: integer('sbt_id').notNull(),
    claimType: smallint('claim_type').notNull(),
    rail: text('rail').$type<'sui' | 'evm'>(),
    txDigest: text('tx_digest'),
    updatedAt: at('updated_at').notNull().defaultNow(),
  },
  (table) => [uniqueIndex('sbt_claims_user_sbt_idx').on(table.userId, table.sbtId), index('sbt_claims_claimed_idx').on(table.userId, table.claimType)],
)

/** Service tokens of the SBT listener: only the SHA-256 of the token is kept. */
export const sbtTokens = pgTable('sbt_tokens', {
  id: text('id').primaryKey(),
  tokenHash: text('token_hash').notNull().unique(),
  environment: text('environment').$type<'staging' | 'production'>().notNull(),
  label: text('label').notNull(),
  createdAt: at('created_at').notNull().defaultNow(),
  revokedAt: at('revoked_at'),
})

/** Single-use sign-in challenges for end users (a Sui personal-message signature answers one). */
export const sbtChallenges = pgTable('sbt_challenges', {
  nonce: text('nonce').primaryKey(),
  suiAddress: text('sui_address').notNull(),
  message: text('message').notNull(),
  inviteCode: text('invite_code'),
  expiresAt: at('expires_at').notNull(),
  usedAt: at('used_at'),
})

/** The sandbox chain reader's state: a number per (chain, address, fact), set by operators and tests. */
export const sbtChainFacts = pgTable(
  'sbt_chain_facts',
  {
    chain: text('chain').notNull(),
    address: text('address').notNull(),
    fact: text('fact').notNull(),
    amount: numeric('amount').notNull(),
  },
  (table) => [primaryKey({ columns: [table.chain, table.address, table.fact] })],
)

/** Mint transactions built for claims on the sandbox chain, and what became of them. */
export const sbtMints = pgTable('sbt_mints', {
  digest: text('digest').primaryKey(),
  rail: text('rail').$type<'sui' | 'evm'>().notNull(),
  userId: bigint('user_id', { mode: 'number' }).notNull(),
  sbtId: integer('sbt_id').notNull(),
  txBytes: text('tx_bytes').notNull(),
  status: text('status').$type<'built' | 'executed' | 'failed'>().notNull(),
  expiresAt: at('expires_at').notNull(),
  createdAt: at('created_at').notNull().defaultNow(),
})

/** Imports already applied, by the SHA-256 of their document: a repeat changes nothing. */
export const sbtImports = pgTable('sbt_imports', {
  documentHash: text('document_hash').primaryKey(),
  summary: jsonb('summary').$type<Record<string, number>>().notNull(),
  createdAt: at('created_at').notNull().defaultNow(),
})
