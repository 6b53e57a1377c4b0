import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { migrationsFolder, queryRows, runMigrations, type DatabaseHandle } from '../../db/client.ts'
import { verifyLedger } from '../../server/ledger/verify.ts'
import { paymentWriteSets } from '../../server/modules/payments/write-sets.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'

/** The migrations up to and including `lastTag`, as a folder of their own. */
function migrationsUpTo(lastTag: string): string {
  const folder = mkdtempSync(join(tmpdir(), 'kassa-migrations-'))
  mkdirSync(join(folder, 'meta'))
  const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as { entries: Array<{ tag: string }> }
  const last = journal.entries.findIndex((entry) => entry.tag === lastTag)
  expect(last).toBeGreaterThanOrEqual(0)
  const entries = journal.entries.slice(0, last + 1)
  for (const entry of entries) copyFileSync(join(migrationsFolder, `${entry.tag}.sql`), join(folder, `${entry.tag}.sql`))
  writeFileSync(join(folder, 'meta', '_journal.json'), JSON.stringify({ ...journal, entries }))
  return folder
}

/** A test database that each test migrates itself: `before` holds the migrations up to `lastTag`. */
function databaseBefore(lastTag: string): { database: TestDatabase; handle: DatabaseHandle; before: string } {
  const fixture = {} as { database: TestDatabase; handle: DatabaseHandle; before: string }
  beforeAll(async () => {
    fixture.database = await createTestDatabase({ bare: true })
    fixture.handle = await fixture.database.open()
    fixture.before = migrationsUpTo(lastTag)
  })
  afterAll(async () => {
    rmSync(fixture.before, { recursive: true, force: true })
    await fixture.database.drop()
  })
  return fixture
}

describe('migration 0010: a movement carries its legs', () => {
  const fx = databaseBefore('0009_lean_indexes')

  test('carries every existing posting over into its movement, in leg order, and the ledger still verifies', async () => {
    await runMigrations(fx.handle, fx.database.databaseUrl, fx.before)
    const db = fx.handle.db
    await db.execute(sql`insert into ledger_movements (id, org_id, kind, reference, created_at) values
      ('mv_fund', 'org_a', 'sandbox_funding', 'fund_1', now()),
      ('mv_transfer', 'org_a', 'transfer', 'tr_1', now())`)
    // Legs inserted out of order: the migration orders them by their leg number.
    await db.execute(sql`insert into ledger_postings (movement_id, leg, org_id, account_id, bucket, asset, amount) values
      ('mv_fund', 1, 'org_a', 'acct_a', 'available', 'USDC', 1000),
      ('mv_fund', 0, 'org_a', 'system:faucet', 'available', 'USDC', -1000),
      ('mv_transfer', 2, 'org_a', 'system:fees', 'available', 'USDC', 2),
      ('mv_transfer', 0, 'org_a', 'acct_a', 'available', 'USDC', -300),
      ('mv_transfer', 1, 'org_a', 'acct_b', 'available', 'USDC', 298)`)
    await db.execute(sql`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at) values
      ('org_a', 'system:faucet', 'USDC', 'system', -1000, 0, 0, -1000, now()),
      ('org_a', 'acct_a', 'USDC', 'customer', 700, 0, 0, 700, now()),
      ('org_a', 'acct_b', 'USDC', 'customer', 298, 0, 0, 298, now()),
      ('org_a', 'system:fees', 'USDC', 'system', 2, 0, 0, 2, now())`)

    await runMigrations(fx.handle, fx.database.databaseUrl)

    const rows = await queryRows<{ id: string; accounts: string[]; buckets: string[]; assets: string[]; amounts: string[] }>(
      db,
      sql`select id, accounts, buckets, assets, array(select a::text from unnest(amounts) a) as amounts from ledger_movements order by id`,
    )
    expect(rows).toEqual([
      { id: 'mv_fund', accounts: ['system:faucet', 'acct_a'], buckets: ['available', 'available'], assets: ['USDC', 'USDC'], amounts: ['-1000', '1000'] },
      { id: 'mv_transfer', accounts: ['acct_a', 'acct_b', 'system:fees'], buckets: ['available', 'available', 'available'], assets: ['USDC', 'USDC', 'USDC'], amounts: ['-300', '298', '2'] },
    ])
    const [postings] = await queryRows<{ table: string | null }>(db, sql`select to_regclass('ledger_postings')::text as table`)
    expect(postings!.table).toBeNull()
    const report = await verifyLedger(db, paymentWriteSets.flatMap((set) => (set.journal === undefined ? [] : [set.journal])))
    expect(report.problems).toEqual([])
    expect(report.counts).toEqual({ balances: 4, movements: 2, postings: 5 })
    // History stays append-only after the rewrite the migration made.
    const refused = await db.execute(sql`update ledger_movements set kind = 'changed'`).then(
      () => '',
      (error: unknown) => String((error as { cause?: unknown }).cause ?? error),
    )
    expect(refused).toContain('append-only')
  })
})

describe('migration 0011: payments are keyed by (org_id, id)', () => {
  const fx = databaseBefore('0010_movement_legs')

  test('keeps every payment, keys them by organization and id, and reads an organization through the key alone', async () => {
    await runMigrations(fx.handle, fx.database.databaseUrl, fx.before)
    const db = fx.handle.db
    await db.execute(sql`insert into payments (id, org_id, account_id, asset, amount, requested_amount, state, hold_id, expires_at, created_at) values
      ('pay_2', 'org_a', 'acct_a', 'USDC', 125, '1.25', 'authorized', 'hold_2', now() + interval '1 day', now()),
      ('pay_1', 'org_a', 'acct_b', 'USDC', 300, '3.00', 'captured', 'hold_1', now() + interval '1 day', now()),
      ('pay_3', 'org_b', 'acct_c', 'USDT', null, '9', 'declined', null, null, now())`)

    await runMigrations(fx.handle, fx.database.databaseUrl)

    const rows = await queryRows<{ id: string; org_id: string; state: string }>(db, sql`select id, org_id, state from payments order by org_id, id`)
    expect(rows).toEqual([
      { id: 'pay_1', org_id: 'org_a', state: 'captured' },
      { id: 'pay_2', org_id: 'org_a', state: 'authorized' },
      { id: 'pay_3', org_id: 'org_b', state: 'declined' },
    ])
    const key = await queryRows<{ column: string }>(
      db,
      sql`select a.attname as column from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
          where i.indrelid = 'payments'::regclass and i.indisprimary order by array_position(i.indkey::int2[], a.attnum)`,
    )
    expect(key.map((entry) => entry.column)).toEqual(['org_id', 'id'])
    const indexes = await queryRows<{ name: string }>(db, sql`select indexrelid::regclass::text as name from pg_index where indrelid = 'payments'::regclass order by 1`)
    expect(indexes.map((entry) => entry.name)).toEqual(['payments_account_idx', 'payments_authorized_idx', 'payments_pkey'])
    // The same id in another organization is another key; the same key twice is refused.
    await db.execute(sql`insert into payments (id, org_id, account_id, asset, requested_amount, state, created_at) values ('pay_1', 'org_b', 'acct_c', 'USDC', '1', 'declined', now())`)
    const duplicate = await db.execute(sql`insert into payments (id, org_id, account_id, asset, requested_amount, state, created_at) values ('pay_1', 'org_a', 'acct_a', 'USDC', '1', 'declined', now())`).then(
      () => '',
      (error: unknown) => String((error as { cause?: unknown }).cause ?? error),
    )
    expect(duplicate).toContain('payments_pkey')
    // A lookup and an organization's list in id order both read the key (sequential scans priced out,
    // as on a table large enough for it to matter).
    const plans = await db.transaction(async (tx) => {
      await tx.execute(sql`set local enable_seqscan = off`)
      const explained: string[] = []
      for (const query of [
        sql`explain select * from payments where org_id = 'org_a' and id = 'pay_2'`,
        sql`explain select * from payments where org_id = 'org_a' and id > 'pay_1' order by id limit 10`,
      ]) {
        explained.push((await queryRows<{ 'QUERY PLAN': string }>(tx, query)).map((line) => line['QUERY PLAN']).join('\n'))
      }
      return explained
    })
    for (const plan of plans) {
      expect(plan).toContain('payments_pkey')
      expect(plan).not.toContain('Sort')
    }
  })
})
