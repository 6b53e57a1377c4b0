import postgres from 'postgres'
import { EMBEDDED_IN_MEMORY, openDatabase, withDatabaseName, type DatabaseHandle } from '../../db/client.ts'

/** The Postgres server tests use when `DATABASE_URL` is set; otherwise they run on embedded PGlite. */
export const serverUrl = process.env.DATABASE_URL && process.env.DATABASE_URL !== '' ? process.env.DATABASE_URL : undefined
export const onPostgres = serverUrl !== undefined

export interface TestDatabase {
  /** The URL of this file's own database, or undefined on the embedded default. */
  databaseUrl: string | undefined
  /** An open handle; for PGlite it is the only way in, so the app must reuse it. */
  open(): Promise<DatabaseHandle>
  drop(): Promise<void>
}

/**
 * Each test file builds its own database: a fresh Postgres database (created and dropped here) or
 * a fresh in-memory PGlite. Nothing depends on data another test left behind.
 */
export async function createTestDatabase(): Promise<TestDatabase> {
  if (serverUrl === undefined) {
    let handle: DatabaseHandle | undefined
    return {
      databaseUrl: undefined,
      async open() {
        handle ??= await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 })
        return handle
      },
      async drop() {
        await handle?.close().catch(() => {})
      },
    }
  }
  const name = `kassa_test_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  await admin.end()
  const databaseUrl = withDatabaseName(serverUrl, name)
  const handles: DatabaseHandle[] = []
  return {
    databaseUrl,
    async open() {
      const handle = await openDatabase({ databaseUrl, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 10 })
      handles.push(handle)
      return handle
    },
    async drop() {
      for (const handle of handles) await handle.close().catch(() => {})
      const cleanup = postgres(serverUrl, { max: 1, onnotice: () => {} })
      await cleanup.unsafe(`drop database if exists "${name}" with (force)`)
      await cleanup.end()
    },
  }
}
