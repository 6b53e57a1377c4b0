import { describe, expect, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { openDatabase, queryRows, runMigrations } from '../../db/client.ts'

const SOCKET_FOLDER = '/var/run/postgresql'
const socketPresent = existsSync(`${SOCKET_FOLDER}/.s.PGSQL.5432`)

// Needs a Postgres listening on the usual Unix socket (the CI machine's); the URL form is libpq's.
describe.skipIf(!socketPresent)('DATABASE_URL over a Unix socket', () => {
  test('postgres://user@localhost/db?host=/var/run/postgresql reaches the server through its socket, migrations and the ledger writer included', async () => {
    const name = `kassa_test_socket_${Date.now().toString(36)}`
    const admin = postgres(`postgres://postgres@localhost/postgres`, { host: SOCKET_FOLDER, max: 1, onnotice: () => {} })
    await admin.unsafe(`create database "${name}"`)
    const url = `postgres://postgres@localhost/${name}?host=${SOCKET_FOLDER}`
    try {
      const handle = await openDatabase({ databaseUrl: url, embeddedPath: '', poolMax: 2 })
      try {
        await runMigrations(handle, url)
        // A Unix-socket client has no client address; a TCP one would.
        const [pool] = await queryRows<{ address: string | null }>(handle.db, sql`select inet_client_addr()::text as address`)
        const [writer] = await queryRows<{ address: string | null }>(handle.writer, sql`select inet_client_addr()::text as address`)
        expect(pool!.address).toBeNull()
        expect(writer!.address).toBeNull()
        const [tables] = await queryRows<{ count: string }>(handle.db, sql`select count(*)::text as count from ledger_writer_sequences`)
        expect(tables!.count).toBe('0')
      } finally {
        await handle.close()
      }
    } finally {
      await admin.unsafe(`drop database if exists "${name}" with (force)`)
      await admin.end()
    }
  })
})
