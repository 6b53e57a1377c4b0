import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows, runMigrations, type Database } from '../../db/client.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'

/**
 * The schema stays ready for a database distributed by organization (docs/scale-out.md, "Beyond one
 * database"): every table that holds an organization's data carries the organization's id in its
 * primary key or as the first column of an index, and every table without one is global on
 * purpose, listed below with the reason. Read from the migrated database's catalog, so what is
 * checked is what the migrations built, not what the drizzle schema says.
 */

/** The column that names the organization a row belongs to, in every table that has one. */
const ORGANIZATION_COLUMN = 'org_id'

/**
 * Tables that hold no organization's data, each with why. On a distributed database they are
 * reference tables or stay on the coordinator (docs/scale-out.md says which).
 */
const GLOBAL_TABLES: Record<string, string> = {
  // The organizations themselves: their id is the organization id, and it is the primary key.
  organizations: 'the organizations; id is the organization id',
  // The group-commit writer's order guard: one row per writer process, unlogged.
  ledger_writer_sequences: 'writer bookkeeping, one row per writer',
  // Counted per bucket, an API key's (`key:…`) or an address's (`ip:…`), in minute windows.
  rate_limit_counters: 'rate limits keyed by key or address',
  // Which process serves the database (the serving lock's holder).
  serving_instance: 'instance bookkeeping',
  // The webhook worker's one position in the whole event log.
  webhook_outbox_cursor: 'the delivery worker’s position in the log',
  // The platform's statement signing keys (one JWKS for every organization).
  statement_signing_keys: 'platform signing keys',
  // The vault catalog, its prices, cycles, clock and sandbox venue are platform-wide: every
  // organization's accounts invest in the same vaults. An organization's part of them is in
  // vault_intents, vault_accruals and the save policy tables, which carry the organization.
  vaults: 'platform vault catalog',
  vault_prices: 'platform vault prices',
  vault_cycles: 'platform vault cycles (one cycle gathers every organization’s intents)',
  vault_clock: 'the vaults’ platform-wide clock',
  vault_accrual_days: 'per vault: the days whose accruals are computed',
  sandbox_venue_navs: 'the sandbox venue’s state per vault',
  // The SBT data API is another product: its users are wallet addresses, not organizations.
  sbt_users: 'SBT data API',
  sbt_counters: 'SBT data API',
  sbt_campaigns: 'SBT data API',
  sbt_credential_groups: 'SBT data API',
  sbt_credentials: 'SBT data API',
  sbt_credential_results: 'SBT data API',
  sbt_clicks: 'SBT data API',
  sbt_rewards: 'SBT data API',
  sbt_claims: 'SBT data API',
  sbt_tokens: 'SBT data API',
  sbt_challenges: 'SBT data API',
  sbt_chain_facts: 'SBT data API',
  sbt_mints: 'SBT data API',
  sbt_imports: 'SBT data API',
  // Cluster mode's settings, members and partition leases (migration 0050): instance bookkeeping.
  // Listed before that migration reaches this branch: the check does not require a listed table to exist.
  cluster_settings: 'cluster bookkeeping',
  cluster_members: 'cluster bookkeeping',
  cluster_partitions: 'cluster bookkeeping',
}

/**
 * Keys and unique indexes of organization tables that do not contain the organization, each with
 * what it becomes when the tables are distributed by organization (a distributed database enforces
 * uniqueness only within a shard, so only with the distribution column in it). docs/scale-out.md,
 * "What changes in keys and statements", lists the same; a new table keyed by `(id)` alone lands
 * here and has to be written into both, or keyed `(org_id, id)` from the start, as `payments` is.
 */
const KEYS_TO_CHANGE_WHEN_DISTRIBUTED: Record<string, string> = {
  accounts_pkey: '(org_id, id)',
  allowlist_entries_pkey: '(org_id, id)',
  attestation_keys_pkey: '(org_id, id)',
  chain_arrivals_pkey: '(org_id, id)',
  chain_arrivals_observation_key: '(org_id, network, tx_hash, address)',
  chain_withdrawals_pkey: '(org_id, withdrawal_id)',
  deposit_addresses_pkey: '(org_id, id)',
  deposit_addresses_address_key: 'moves to the reference table deposit_address_owners',
  deposits_pkey: '(org_id, id)',
  events_pkey: '(org_id, id)',
  holds_pkey: '(org_id, id)',
  ledger_movements_pkey: '(org_id, id)',
  operator_actions_pkey: '(org_id, id)',
  quotes_pkey: '(org_id, id)',
  statements_pkey: '(org_id, id)',
  transfers_pkey: '(org_id, id)',
  vault_intents_pkey: '(org_id, id)',
  webhook_deliveries_pkey: '(org_id, id)',
  webhook_deliveries_event_webhook_unique: '(org_id, event_id, webhook_id)',
  webhook_endpoints_pkey: '(org_id, id)',
  withdrawals_pkey: '(org_id, id)',
  withdrawals_quote_unique: '(org_id, quote_id)',
  // api_keys becomes a reference table (looked up by key hash before the organization is known):
  // its keys stay as they are.
  api_keys_pkey: 'unchanged: reference table',
  api_keys_key_hash_unique: 'unchanged: reference table',
}

/** Unique indexes (primary keys included) of tables with an organization column that leave it out. */
async function uniqueIndexesWithoutOrganization(db: Database, schema: string): Promise<string[]> {
  const rows = await queryRows<{ index: string }>(
    db,
    sql`select ic.relname as "index"
        from pg_index i join pg_class c on c.oid = i.indrelid join pg_class ic on ic.oid = i.indexrelid
        join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = ${schema} and i.indisunique
          and exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = ${ORGANIZATION_COLUMN} and not a.attisdropped)
          and not exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attnum = any (i.indkey::int2[]) and a.attname = ${ORGANIZATION_COLUMN})
        order by ic.relname collate "C"`,
  )
  return rows.map((row) => row.index)
}

interface TableCatalog {
  table: string
  hasOrganization: boolean
  organizationInPrimaryKey: boolean
  /** Indexes (the primary key's included) whose first column is the organization's, comma-separated. */
  organizationLedIndexes: string | null
}

/** Every ordinary and partitioned table of `schema`, with where its organization column is. */
async function readCatalog(db: Database, schema: string): Promise<TableCatalog[]> {
  const rows = await queryRows<{ table: string; has_org: boolean; org_in_pk: boolean; org_led: string | null }>(
    db,
    sql`select c.relname as "table",
          exists (select 1 from pg_attribute a
                  where a.attrelid = c.oid and a.attname = ${ORGANIZATION_COLUMN} and a.attnum > 0 and not a.attisdropped) as has_org,
          exists (select 1 from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any (i.indkey::int2[])
                  where i.indrelid = c.oid and i.indisprimary and a.attname = ${ORGANIZATION_COLUMN}) as org_in_pk,
          (select string_agg(ic.relname, ',' order by ic.relname)
             from pg_index i join pg_class ic on ic.oid = i.indexrelid
             join pg_attribute a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]
            where i.indrelid = c.oid and a.attname = ${ORGANIZATION_COLUMN}) as org_led
        from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = ${schema} and c.relkind in ('r', 'p')
        order by c.relname collate "C"`,
  )
  return rows.map((row) => ({ table: row.table, hasOrganization: row.has_org, organizationInPrimaryKey: row.org_in_pk, organizationLedIndexes: row.org_led }))
}

/** What breaks the rule, one sentence per table; empty when every table keeps it. */
function colocationFindings(catalog: TableCatalog[], globalTables: Record<string, string>): string[] {
  const findings: string[] = []
  for (const entry of catalog) {
    const listedGlobal = Object.hasOwn(globalTables, entry.table)
    if (entry.hasOrganization && listedGlobal) findings.push(`${entry.table} has ${ORGANIZATION_COLUMN} but is listed as global`)
    if (entry.hasOrganization && !entry.organizationInPrimaryKey && entry.organizationLedIndexes === null) {
      findings.push(`${entry.table} has ${ORGANIZATION_COLUMN} in neither its primary key nor the first column of an index`)
    }
    if (!entry.hasOrganization && !listedGlobal) findings.push(`${entry.table} has no ${ORGANIZATION_COLUMN} and is not listed as global`)
  }
  return findings
}

let database: TestDatabase
let db: Database

beforeAll(async () => {
  database = await createTestDatabase()
  const handle = await database.open()
  await runMigrations(handle, database.databaseUrl)
  db = handle.db
})

afterAll(async () => {
  await database.drop()
})

describe('the migrated schema, read from the catalog', () => {
  test('carries the organization in the primary key or a leading index column of every organization table', async () => {
    const catalog = await readCatalog(db, 'public')
    expect(colocationFindings(catalog, GLOBAL_TABLES)).toEqual([])
    // The check looked at the real schema: organization tables and global tables are both there.
    const names = catalog.map((entry) => entry.table)
    for (const table of ['accounts', 'payments', 'holds', 'ledger_balances', 'ledger_movements', 'events', 'webhook_deliveries', 'organizations', 'vaults']) {
      expect(names).toContain(table)
    }
  })

  test('finds the hot tables co-located through their key or an index that leads with the organization', async () => {
    const byTable = new Map((await readCatalog(db, 'public')).map((entry) => [entry.table, entry]))
    // Keyed by organization already: nothing was added to these.
    for (const table of ['payments', 'ledger_balances', 'idempotency_records']) expect(byTable.get(table)?.organizationInPrimaryKey).toBe(true)
    // Keyed by id, found by organization through an index (migration 0051 for holds and deliveries).
    expect(byTable.get('holds')?.organizationLedIndexes).toBe('holds_pending_org_idx')
    expect(byTable.get('ledger_movements')?.organizationLedIndexes).toBe('ledger_movements_org_created_idx')
    expect(byTable.get('webhook_deliveries')?.organizationLedIndexes).toBe('webhook_deliveries_open_idx')
  })

  test('leaves the organization out of exactly the keys the scale-out document says change when distributed', async () => {
    expect(await uniqueIndexesWithoutOrganization(db, 'public')).toEqual(Object.keys(KEYS_TO_CHANGE_WHEN_DISTRIBUTED).sort())
  })
})

describe('the check itself', () => {
  test('reports a table without an organization index, an unlisted global table, and a listed one that is not global', async () => {
    await db.execute(sql.raw(`create schema colocation_probe`))
    const statements = [
      // Breaks the rule: the organization column is in no key and no index.
      'create table colocation_probe.unindexed (id text primary key, org_id text not null)',
      // Breaks the rule: the organization column is in an index, but not first.
      'create table colocation_probe.second_column (id text primary key, org_id text not null)',
      'create index second_column_idx on colocation_probe.second_column (id, org_id)',
      // Breaks the rule: no organization column and not listed as global.
      'create table colocation_probe.unlisted (id text primary key)',
      // Breaks the rule: listed as global while it holds an organization's rows.
      'create table colocation_probe.mislisted (org_id text, id text, primary key (org_id, id))',
      // Keep it: the organization in the key (anywhere in it), first in an index, or a listed global table.
      'create table colocation_probe.keyed (id text, org_id text, primary key (id, org_id))',
      'create table colocation_probe.led (id text primary key, org_id text not null)',
      'create index led_idx on colocation_probe.led (org_id, id)',
      'create table colocation_probe.listed (id text primary key)',
    ]
    for (const statement of statements) await db.execute(sql.raw(statement))
    try {
      const findings = colocationFindings(await readCatalog(db, 'colocation_probe'), { listed: 'a global table', mislisted: 'wrongly global' })
      expect(findings).toEqual([
        'mislisted has org_id but is listed as global',
        'second_column has org_id in neither its primary key nor the first column of an index',
        'unindexed has org_id in neither its primary key nor the first column of an index',
        'unlisted has no org_id and is not listed as global',
      ])
      // Keys without the organization, on tables that have it; `listed` has none and is left out.
      expect(await uniqueIndexesWithoutOrganization(db, 'colocation_probe')).toEqual(['led_pkey', 'second_column_pkey', 'unindexed_pkey'])
    } finally {
      await db.execute(sql.raw(`drop schema colocation_probe cascade`))
    }
  })
})
