import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { migrationsFolder, queryRows, runMigrations, type DatabaseHandle } from '../../db/client.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'

const TAG = '0018_contract_names'

/** The migrations before `tag`, as a folder of their own. */
function migrationsBefore(tag: string): string {
  const folder = mkdtempSync(join(tmpdir(), 'kassa-migrations-'))
  mkdirSync(join(folder, 'meta'))
  const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as { entries: Array<{ tag: string }> }
  const at = journal.entries.findIndex((entry) => entry.tag === tag)
  expect(at).toBeGreaterThan(0)
  const entries = journal.entries.slice(0, at)
  for (const entry of entries) copyFileSync(join(migrationsFolder, `${entry.tag}.sql`), join(folder, `${entry.tag}.sql`))
  writeFileSync(join(folder, 'meta', '_journal.json'), JSON.stringify({ ...journal, entries }))
  return folder
}

describe(`migration ${TAG}: stored rows take the contract's names`, () => {
  let database: TestDatabase
  let handle: DatabaseHandle
  let before: string
  beforeAll(async () => {
    database = await createTestDatabase({ bare: true })
    handle = await database.open()
    before = migrationsBefore(TAG)
    await runMigrations(handle, database.databaseUrl, before)
  })
  afterAll(async () => {
    rmSync(before, { recursive: true, force: true })
    await database.drop()
  })

  test('renames the states, decline codes and funding event names of rows written before it, and nothing else', async () => {
    const db = handle.db
    await db.execute(sql`insert into payments (id, org_id, account_id, asset, amount, requested_amount, state, failure_code, hold_id, expires_at, created_at, closed_at) values
      ('pay_lapsed', 'org_a', 'acct_a', 'USDC', 125, '1.25', 'expired', null, 'hold_pay_lapsed', now(), now(), now()),
      ('pay_open', 'org_a', 'acct_a', 'USDC', 300, '3.00', 'authorized', null, 'hold_pay_open', now() + interval '1 day', now(), null),
      ('pay_poor', 'org_a', 'acct_a', 'USDC', 900, '9.00', 'declined', 'insufficient_funds', null, null, now(), now()),
      ('pay_small', 'org_a', 'acct_a', 'USDC', 1, '0.000001', 'declined', 'amount_too_small', null, null, now(), now()),
      ('pay_late', 'org_a', 'acct_a', 'USDC', 2, '0.000002', 'declined', 'processing_timeout', null, null, now(), now())`)
    await db.execute(sql`insert into events (id, org_id, type, data) values
      ('evt_poor', 'org_a', 'payment.declined', '{"paymentId":"pay_poor","failureCode":"insufficient_funds"}'),
      ('evt_small', 'org_a', 'payment.declined', '{"paymentId":"pay_small","failureCode":"amount_too_small"}'),
      ('evt_late', 'org_a', 'payment.declined', '{"paymentId":"pay_late","failureCode":"processing_timeout"}')`)
    await db.execute(sql`insert into allowlist_entries (id, org_id, account_id, network, address, state, activates_at, created_at) values
      ('alw_locked', 'org_a', 'acct_a', 'sui', '0x01', 'pending', now() + interval '1 day', now()),
      ('alw_active', 'org_a', 'acct_a', 'sui', '0x02', 'active', now(), now())`)
    await db.execute(sql`insert into withdrawals (id, org_id, account_id, allowlist_entry_id, quote_id, network, asset, address, amount, network_fee, service_fee, total_debited, state, approval_required, created_by_key_id, created_at) values
      ('wd_done', 'org_a', 'acct_a', 'alw_active', 'qt_1', 'sui', 'USDC', '0x02', 100, 1, 1, 102, 'completed', false, 'key_1', now()),
      ('wd_failed', 'org_a', 'acct_a', 'alw_active', 'qt_2', 'sui', 'USDC', '0x02', 100, 1, 1, 102, 'failed', false, 'key_1', now())`)
    await db.execute(sql`insert into events (id, org_id, type, data) values
      ('evt_declared', 'org_a', 'transaction.deposit.confirmed', '{"intentId":"dep_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f","depositId":"dep_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f"}'),
      ('evt_arrived', 'org_a', 'transaction.deposit.confirmed', '{"depositId":"dep_1"}')`)
    await db.execute(sql`insert into webhook_endpoints (id, org_id, url, events, secret, created_at, updated_at) values
      ('wh_exact', 'org_a', 'https://a.example', array['transaction.deposit.confirmed', 'account.created'], 's', now(), now()),
      ('wh_namespace', 'org_a', 'https://b.example', array['transaction.*'], 's', now(), now()),
      ('wh_all', 'org_a', 'https://c.example', array['*'], 's', now(), now()),
      ('wh_other', 'org_a', 'https://d.example', array['payment.*'], 's', now(), now())`)

    await runMigrations(handle, database.databaseUrl)

    const payments = await queryRows<{ id: string; state: string; failure_code: string | null }>(db, sql`select id, state, failure_code from payments order by id`)
    expect(payments).toEqual([
      { id: 'pay_lapsed', state: 'lapsed', failure_code: null },
      { id: 'pay_late', state: 'declined', failure_code: 'processing_timeout' },
      { id: 'pay_open', state: 'authorized', failure_code: null },
      { id: 'pay_poor', state: 'declined', failure_code: 'insufficient_available' },
      { id: 'pay_small', state: 'declined', failure_code: 'min_amount' },
    ])
    const entries = await queryRows<{ id: string; state: string }>(db, sql`select id, state from allowlist_entries order by id`)
    expect(entries).toEqual([
      { id: 'alw_active', state: 'active' },
      { id: 'alw_locked', state: 'registered' },
    ])
    const endpoints = await queryRows<{ id: string; events: string[] }>(db, sql`select id, events from webhook_endpoints order by id`)
    expect(endpoints).toEqual([
      { id: 'wh_all', events: ['*'] },
      { id: 'wh_exact', events: ['funding.deposit.confirmed', 'account.created'] },
      { id: 'wh_namespace', events: ['transaction.*', 'funding.deposit.confirmed'] },
      { id: 'wh_other', events: ['payment.*'] },
    ])
    const withdrawals = await queryRows<{ id: string; state: string }>(db, sql`select id, state from withdrawals order by id`)
    expect(withdrawals).toEqual([
      { id: 'wd_done', state: 'confirmed' },
      { id: 'wd_failed', state: 'failed' },
    ])
    const events = await queryRows<{ id: string; type: string; data: Record<string, unknown> }>(db, sql`select id, type, data from events order by id`)
    expect(events).toEqual([
      { id: 'evt_arrived', type: 'funding.deposit.confirmed', data: { depositId: 'dep_1' } },
      {
        id: 'evt_declared',
        type: 'funding.deposit.confirmed',
        data: { intentId: 'txi_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f', depositId: 'dep_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f' },
      },
      { id: 'evt_late', type: 'payment.declined', data: { paymentId: 'pay_late', failureCode: 'processing_timeout' } },
      { id: 'evt_poor', type: 'payment.declined', data: { paymentId: 'pay_poor', failureCode: 'insufficient_available' } },
      { id: 'evt_small', type: 'payment.declined', data: { paymentId: 'pay_small', failureCode: 'min_amount' } },
    ])
  })
})
