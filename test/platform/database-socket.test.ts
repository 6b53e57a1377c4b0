import { describe, expect, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { openDatabase, queryRows, runMigrations, type DatabaseHandle } from '../../db/client.ts'

const SOCKET_FOLDER = '/var/run/postgresql'
const socketPresent = existsSync(`${SOCKET_FOLDER}/.s.PGSQL.5432`)

/** A fresh, migrated database reached through the socket by libpq's URL form; dropped afterwards. */
async function withSocketDatabase(prefix: string, run: (handle: DatabaseHandle) => Promise<void>): Promise<void> {
  const name = `${prefix}_${Date.now().toString(36)}`
  const admin = postgres(`postgres://postgres@localhost/postgres`, { host: SOCKET_FOLDER, max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  const url = `postgres://postgres@localhost/${name}?host=${SOCKET_FOLDER}`
  try {
    const handle = await openDatabase({ databaseUrl: url, embeddedPath: '', poolMax: 2 })
    try {
      await runMigrations(handle, url)
      await run(handle)
    } finally {
      await handle.close()
    }
  } finally {
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end()
  }
}

// Needs a Postgres listening on the usual Unix socket (the CI machine's); the URL form is libpq's.
describe.skipIf(!socketPresent)('DATABASE_URL over a Unix socket', () => {
  test('postgres://user@localhost/db?host=/var/run/postgresql reaches the server through its socket, migrations and the ledger writer included', async () => {
    await withSocketDatabase('kassa_test_socket', async (handle) => {
      // A Unix-socket client has no client address; a TCP one would.
      const [pool] = await queryRows<{ address: string | null }>(handle.db, sql`select inet_client_addr()::text as address`)
      const [writer] = await queryRows<{ address: string | null }>(handle.writer, sql`select inet_client_addr()::text as address`)
      expect(pool!.address).toBeNull()
      expect(writer!.address).toBeNull()
      const [tables] = await queryRows<{ count: string }>(handle.db, sql`select count(*)::text as count from ledger_writer_sequences`)
      expect(tables!.count).toBe('0')
    })
  })

  test("the ledger writer's connection joins a batch's rows to its tables by key, where the pool would scan and hash the table", async () => {
    await withSocketDatabase('kassa_test_plan', async (handle) => {
      await handle.db.execute(sql`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
        select 'org_plan', 'acc_' || n, 'USDC', 'customer', 100, 0, 0, 100, now() from generate_series(1, 2000) n`)
      await handle.db.execute(sql`analyze ledger_balances`)
      // The shape of a batch's balance update: its rows come from one JSON document.
      const update = sql`explain update ledger_balances b set available = b.available + d.available
        from jsonb_to_recordset('[{"org_id":"org_plan","account_id":"acc_7","asset":"USDC","available":1}]'::jsonb) as d(org_id text, account_id text, asset text, available numeric)
        where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset`
      const plan = async (db: DatabaseHandle['db']) => (await queryRows<{ 'QUERY PLAN': string }>(db, update)).map((row) => row['QUERY PLAN']).join('\n')
      const pool = await plan(handle.db)
      const writer = await plan(handle.writer)
      expect(pool).toContain('Seq Scan on ledger_balances')
      expect(writer).not.toContain('Seq Scan on ledger_balances')
      expect(writer).toContain('Index Scan using ledger_balances_org_id_account_id_asset_pk')
      // Priced-out plans must not pass the JIT threshold and compile for hundreds of milliseconds.
      const [jit] = await queryRows<{ jit: string }>(handle.writer, sql`show jit`)
      expect(jit!.jit).toBe('off')
    })
  })
})
