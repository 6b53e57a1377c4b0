import { existsSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { sql, type SQL } from 'drizzle-orm'
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core'
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite'
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator'
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js'
import { migrate as migratePostgres } from 'drizzle-orm/postgres-js/migrator'
import postgres from 'postgres'
import { lockDataFolder } from './folder-lock.ts'
import { ensureTemplate, extractTemplate, forgetTemplate, initdbTemplatePath, loadTemplate, migratedTemplatePath, pgliteWasmModule, pruneTemplates, runPgliteInit } from './pglite-template.ts'
import { assert } from '../server/lib/assert.ts'
import type { TextStatement } from './bulk.ts'
import * as schema from './schema/index.ts'

export type Schema = typeof schema
export type Database = PgDatabase<PgQueryResultHKT, Schema>
export type Transaction = Parameters<Parameters<Database['transaction']>[0]>[0]
/** Anything a query can run on: the database itself or an open transaction. */
export type Executor = Database | Transaction

export const migrationsFolder = join(import.meta.dir, 'migrations')

/** The in-memory embedded database, used by tests that run without `DATABASE_URL`. */
export const EMBEDDED_IN_MEMORY = 'memory://'

export interface DatabaseHandle {
  kind: 'postgres' | 'pglite'
  db: Database
  /**
   * The ledger writer's own connection (postgres.js with `max: 1`), so its statements reach
   * Postgres in the order sent and can be pipelined: Postgres runs one connection's statements one
   * after another. On PGlite, which runs in process, the same database as `db`.
   */
  writer: Database
  /**
   * Postgres: takes a session advisory lock (two 32-bit keys) on a connection of its own, kept for
   * the life of the handle, so other processes can tell this one runs while they see the lock held
   * (`pg_locks`). Answers false when another session holds it already. Absent on the embedded
   * database, which one process at a time opens.
   */
  holdSessionLock?(classId: number, objectId: number): Promise<boolean>
  /** Subscribes to a NOTIFY channel; resolves once listening. */
  listen(channel: string, onPayload: (payload: string) => void): Promise<void>
  close(): Promise<void>
}

export interface DatabaseOptions {
  databaseUrl: string | undefined
  /** Folder of the embedded database, or `memory://` for a throwaway in-memory one. */
  embeddedPath: string
  poolMax: number
  /**
   * Postgres: the pool's `application_name` (default `kassa`) and settings of its sessions (the
   * delivery process's: `synchronous_commit` off, see `createDeliveryRuntime`).
   */
  pool?: { applicationName: string; settings: Record<string, string> }
  /**
   * The embedded database: a new one starts without the project's migrations (tests of a migration
   * itself). By default it starts from a template that holds them.
   */
  bare?: boolean
}

export async function openDatabase(options: DatabaseOptions): Promise<DatabaseHandle> {
  if (options.databaseUrl !== undefined) return openPostgres(options.databaseUrl, options.poolMax, options.pool)
  return openPglite(options.embeddedPath, options.bare === true)
}

/** Longest wait between attempts to reconnect to Postgres. */
const RECONNECT_BACKOFF_MAX_S = 0.25

/** The same Postgres URL naming another database on the same server (its options kept). */
export function withDatabaseName(url: string, name: string): string {
  const parsed = new URL(url)
  parsed.pathname = `/${name}`
  return parsed.toString()
}

/**
 * libpq's convention for a Unix socket: `postgres://user@localhost/db?host=/var/run/postgresql`.
 * postgres.js reads the socket folder from its `host` option, not from the URL, so it is taken out
 * of the URL and passed as the option.
 */
export function socketOf(url: string): { url: string; host?: string } {
  const parsed = new URL(url)
  const folder = parsed.searchParams.get('host')
  if (folder === null || !folder.startsWith('/')) return { url }
  parsed.searchParams.delete('host')
  return { url: parsed.toString(), host: folder }
}

/**
 * Planner settings of the writer's connection. Every statement it sends touches rows by key (a
 * batch's balances, claims and answers are joined to their tables on primary keys), but a batch's
 * rows arrive as JSON arrays that Postgres guesses at 100 rows, so against a table of a few
 * thousand rows it chose to read the whole table and hash it, twice per batch for the balances
 * alone. Without seq scans, hash and merge joins it probes the key indexes; measured at 1,000
 * authorizations/s this cut Postgres CPU per answer from 534 to 414-443 µs. A query with no usable
 * index still runs (the settings only price the other plans out), but its priced-out cost would
 * pass the JIT threshold: the driver's catalog query at connect then took 270 ms to compile, so
 * the connection runs without JIT, which never pays off for statements this small. The pool keeps
 * the defaults.
 */
export const WRITER_PLANNER = { enable_seqscan: 'off', enable_hashjoin: 'off', enable_mergejoin: 'off', jit: 'off' }

function openPostgres(databaseUrl: string, poolMax: number, pool = { applicationName: 'kassa', settings: {} }): DatabaseHandle {
  const { url, host } = socketOf(databaseUrl)
  const options = (max: number, applicationName: string, planner: Record<string, string> = {}) => ({
    ...(host === undefined ? {} : { host }),
    max,
    onnotice: () => {},
    // Money columns are numeric(38,0); keep them as exact strings so nothing passes through a float.
    types: { bigint: postgres.BigInt },
    connection: { application_name: applicationName, ...planner },
    // The driver's own curve (3^attempts / 100 s, jittered) but capped at 250 ms instead of 20 s:
    // after an outage the pool reconnects within a quarter of a second of the database coming back.
    backoff: (attempts: number) => (0.5 + Math.random() / 2) * Math.min(3 ** attempts / 100, RECONNECT_BACKOFF_MAX_S),
  })
  const client = postgres(url, options(poolMax, pool.applicationName, pool.settings))
  const writerClient = postgres(url, options(1, 'kassa-ledger-writer', WRITER_PLANNER))
  const db = drizzlePostgres(client, { schema }) as unknown as Database
  let lockClient: ReturnType<typeof postgres> | undefined
  return {
    kind: 'postgres',
    db,
    writer: drizzlePostgres(writerClient, { schema }) as unknown as Database,
    async holdSessionLock(classId, objectId) {
      // A client of one connection that never idles out: the lock lives as long as it does.
      lockClient ??= postgres(url, { ...options(1, `${pool.applicationName}-owner`), idle_timeout: 0, max_lifetime: null })
      const [row] = await lockClient`select pg_try_advisory_lock(${classId}::int, ${objectId}::int) as locked`
      return row?.locked === true
    },
    async listen(channel, onPayload) {
      await client.listen(channel, onPayload)
    },
    async close() {
      await Promise.all([client.end({ timeout: 5 }), writerClient.end({ timeout: 5 }), lockClient?.end({ timeout: 5 })])
    },
  }
}

/**
 * The embedded database. initdb never runs in this process (`db/pglite-init.ts`): PGlite keeps
 * everything initdb allocated for the life of the process, about 1 GB of WebAssembly memory and
 * copies of it, where an initialized data directory opens with about 390 MB. A new folder is
 * written from the migrated template, an in-memory database loads it (`bare`: the initdb template),
 * each made once per machine by a child process (`db/pglite-template.ts`). docs/architecture.md,
 * "The embedded database's memory".
 */
async function openPglite(path: string, bare: boolean): Promise<DatabaseHandle> {
  let client: PGlite
  let release = () => {}
  if (path === EMBEDDED_IN_MEMORY) {
    client = bare ? await openPgliteFromTemplate() : await openMigratedInMemory()
  } else {
    mkdirSync(path, { recursive: true })
    release = lockDataFolder(path)
    try {
      if (!existsSync(join(path, 'PG_VERSION'))) await initializeFolder(path)
      client = await PGlite.create(path, { pgliteWasmModule: await pgliteWasmModule() })
    } catch (error) {
      release()
      throw error
    }
  }
  const db = drizzlePglite(client, { schema }) as unknown as Database
  return {
    kind: 'pglite',
    db,
    writer: db,
    async listen(channel, onPayload) {
      await client.listen(channel, onPayload)
    },
    async close() {
      try {
        await client.close()
      } finally {
        release()
      }
    },
  }
}

/** The bare template an in-memory database starts from, named by the PGlite that made it. */
export function pgliteTemplatePath(): string {
  return initdbTemplatePath()
}

/** Makes the bare template at `path` in a child process, if it is not there. */
function ensureInitdbTemplate(path: string): Promise<void> {
  return ensureTemplate(path, () => runPgliteInit(['template', path]), 'running initdb in this process, which keeps about 1 GB more memory')
}

/** Makes the migrated template in a child process, from the bare one, if it is not there. */
async function ensureMigratedTemplate(path: string): Promise<void> {
  await ensureTemplate(
    path,
    async () => {
      await ensureInitdbTemplate(pgliteTemplatePath())
      await runPgliteInit(['migrated', path, pgliteTemplatePath(), migrationsFolder])
      pruneTemplates(path, pgliteTemplatePath())
    },
    'starting from initdb and running every migration',
  )
}

/**
 * A new data folder: written from the migrated template (made first if it is not there), or, where
 * no template can be made, initialized by initdb in a child process as before.
 */
async function initializeFolder(path: string): Promise<void> {
  const template = migratedTemplatePath(migrationsFolder)
  try {
    await ensureMigratedTemplate(template)
  } catch {
    await runPgliteInit(['dir', path])
    return
  }
  try {
    extractTemplate(template, path)
  } catch (error) {
    // Damaged since it was written: made again by the next process that needs it.
    console.warn(`kassa: the embedded database's template ${template} does not load (${String(error)}); running initdb instead`)
    forgetTemplate(template)
    await runPgliteInit(['dir', path])
  }
}

/**
 * An in-memory database with the project's migrations applied, loaded from the migrated template;
 * where that cannot be made or loaded, the bare one (the caller's migrations then run in full).
 */
async function openMigratedInMemory(): Promise<PGlite> {
  const path = migratedTemplatePath(migrationsFolder)
  try {
    await ensureMigratedTemplate(path)
  } catch {
    return openPgliteFromTemplate()
  }
  try {
    return await loadTemplate(path)
  } catch {
    // Damaged since it was written: made again by the next database that needs it.
    forgetTemplate(path)
    return openPgliteFromTemplate()
  }
}

/**
 * An in-memory database loaded from the bare template at `path`, made first if it is not there. A
 * template that does not load (damaged since it was written) is removed and made again, once.
 * Where no template can be made (the temporary folder not writable, another user's), the database
 * runs its own initdb in this process, as PGlite does by itself, and says so once.
 */
export async function openPgliteFromTemplate(path = pgliteTemplatePath()): Promise<PGlite> {
  const first = await loadPgliteTemplate(path)
  if (first.database !== undefined) return first.database
  forgetTemplate(path)
  const second = await loadPgliteTemplate(path)
  if (second.database !== undefined) return second.database
  throw new Error(`the embedded database's template ${path} does not load: ${String(second.error)} (before it was made again: ${String(first.error)})`)
}

/** A database from the template, or its own initdb where no template can be made; the load's error if the template does not load. */
async function loadPgliteTemplate(path: string): Promise<{ database: PGlite; error?: undefined } | { database?: undefined; error: unknown }> {
  try {
    await ensureInitdbTemplate(path)
  } catch {
    return { database: await PGlite.create() }
  }
  try {
    return { database: await loadTemplate(path) }
  } catch (error) {
    return { error }
  }
}

const MIGRATION_LOCK_ID = 7_316_550_001

/**
 * Applies pending migrations (from `folder`, the project's own unless a test gives another). On a
 * shared Postgres several instances may start at once, so the migration runs on one dedicated
 * connection under an advisory lock.
 */
export async function runMigrations(handle: DatabaseHandle, databaseUrl: string | undefined, folder = migrationsFolder): Promise<void> {
  if (handle.kind === 'pglite' || databaseUrl === undefined) {
    await migratePglite(handle.db as never, { migrationsFolder: folder })
    return
  }
  const socket = socketOf(databaseUrl)
  const client = postgres(socket.url, { max: 1, onnotice: () => {}, ...(socket.host === undefined ? {} : { host: socket.host }) })
  try {
    await client`select pg_advisory_lock(${MIGRATION_LOCK_ID})`
    await migratePostgres(drizzlePostgres(client), { migrationsFolder: folder })
    await client`select pg_advisory_unlock(${MIGRATION_LOCK_ID})`
  } finally {
    await client.end({ timeout: 5 })
  }
}

/** `db.execute` answers an array on postgres.js and `{ rows }` on PGlite; this reads both. */
export async function queryRows<Row>(executor: Executor, query: SQL): Promise<Row[]> {
  const result = (await executor.execute(query)) as unknown
  if (Array.isArray(result)) return result as Row[]
  return ((result as { rows: Row[] }).rows ?? []) as Row[]
}

interface PostgresJsClient {
  unsafe(query: string, params: unknown[], options: { prepare: boolean }): Promise<unknown[]>
}

interface PgliteClient {
  query(text: string, params: unknown[], options: { rowMode: 'object' }): Promise<{ rows: unknown[] }>
}

interface DrizzleInternals {
  session?: { client?: Partial<PostgresJsClient & PgliteClient> }
  dialect: { sqlToQuery(query: SQL): { sql: string; params: unknown[] } }
}

const clientOf = (executor: Executor) => (executor as unknown as DrizzleInternals).session?.client

/** Runs a statement prepared once per postgres.js connection and reused (see `queryPrepared`). */
async function runPrepared<Row>(client: PostgresJsClient, text: string, params: unknown[]): Promise<Row[]> {
  return (await client.unsafe(text, params, { prepare: true })) as Row[]
}

/**
 * Like `queryRows`, but on postgres.js the statement is prepared once per connection and reused.
 * Drizzle runs unnamed statements, for which the driver must first ask Postgres for the parameter
 * types and wait for the answer before it can send the values: two round trips per statement, and
 * nothing can be pipelined behind it. The ledger's statements have constant text (see `bulk.ts`), so
 * preparing them is cheap and bounded. Other queries keep drizzle's default, so the per-connection
 * statement cache does not grow with every distinct query text. On PGlite this is `queryRows`.
 */
export async function queryPrepared<Row>(executor: Executor, query: SQL): Promise<Row[]> {
  const client = clientOf(executor)
  if (typeof client?.unsafe !== 'function') return queryRows<Row>(executor, query)
  const { sql: text, params } = (executor as unknown as DrizzleInternals).dialect.sqlToQuery(query)
  return runPrepared<Row>(client as PostgresJsClient, text, params)
}

/**
 * A statement already in the driver's form (`jsonStatement`), without drizzle assembling it: on
 * postgres.js prepared once per connection and reused, as `queryPrepared`; on PGlite, run with its
 * parameters as given.
 */
export async function queryText<Row>(executor: Executor, statement: TextStatement): Promise<Row[]> {
  const client = clientOf(executor)
  if (typeof client?.unsafe === 'function') return runPrepared<Row>(client as PostgresJsClient, statement.text, statement.params)
  assert(typeof client?.query === 'function', 'the database client runs statements with parameters')
  return (await client.query(statement.text, statement.params, { rowMode: 'object' })).rows as Row[]
}

export async function notify(executor: Executor, channel: string, payload: string): Promise<void> {
  await executor.execute(sql`select pg_notify(${channel}, ${payload})`)
}
