import postgres from 'postgres'
import { EMBEDDED_IN_MEMORY, migrationsFolder, openDatabase, runMigrations, withDatabaseName, type DatabaseHandle } from '../../db/client.ts'
import { migrationsHash } from '../../db/pglite-template.ts'

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

export interface TestDatabaseOptions {
  /** Start without the project's migrations (a test of a migration runs them itself). */
  bare?: boolean
}

/**
 * Each test file builds its own database: a fresh Postgres database (created and dropped here) or
 * a fresh in-memory PGlite. Nothing depends on data another test left behind. Both start with the
 * project's migrations applied, copied from a template made once (`bare`: without them), so the
 * migrations the app runs at start find nothing to do.
 */
export async function createTestDatabase(options: TestDatabaseOptions = {}): Promise<TestDatabase> {
  if (serverUrl === undefined) {
    let handle: DatabaseHandle | undefined
    return {
      databaseUrl: undefined,
      async open() {
        handle ??= await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1, bare: options.bare })
        return handle
      },
      async drop() {
        await handle?.close().catch(() => {})
      },
    }
  }
  const name = `kassa_test_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    if (options.bare === true) await admin.unsafe(`create database "${name}"`)
    else {
      const template = await migratedTemplateDatabase(serverUrl)
      await admin.unsafe(`create database "${name}" template "${template}"`).catch(async (error: unknown) => {
        // Another checkout's test process removed it as an old template (see `makeTemplateDatabase`): made again.
        if ((error as { code?: string }).code !== '3D000') throw error
        templateName = undefined
        await admin.unsafe(`create database "${name}" template "${await migratedTemplateDatabase(serverUrl)}"`)
      })
    }
  } finally {
    await admin.end()
  }
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

/** Taken while a template database is looked for or made, so parallel test processes make it once. */
const TEMPLATE_LOCK_ID = 7_316_550_068

let templateName: Promise<string> | undefined

/**
 * The name of a database on the test server holding the project's migrations, which each test
 * database is created from (`create database … template …` copies its files: no migration runs
 * again). Named by a hash of the migrations, so checkouts with different migrations never share
 * one, and kept for later runs with the same migrations. Made under an advisory lock by one process
 * at a time: migrated under a scratch name, then renamed, so its name is only ever seen on a whole
 * one (and no connection to it is left open, which `create database … template` would refuse).
 */
function migratedTemplateDatabase(url: string): Promise<string> {
  templateName ??= makeTemplateDatabase(url, `kassa_template_${migrationsHash(migrationsFolder)}`)
  // A failure is not kept: the next test database tries again.
  templateName.catch(() => {
    templateName = undefined
  })
  return templateName
}

/** Templates of other migrations kept besides the current one (a checkout of another branch may use them again). */
const OTHER_TEMPLATES_KEPT = 2

/**
 * Drops the templates of other migrations but the newest few, under the template lock, once a new
 * one was made: without it each change of the migrations would leave one more on the server. One
 * in use by another process's `create database` is left (the drop fails); a process that finds its
 * template gone makes it again.
 */
async function dropOldTemplates(admin: postgres.Sql, current: string): Promise<void> {
  const others = await admin<{ datname: string; made: string | null }[]>`
    select datname, shobj_description(oid, 'pg_database') as made from pg_database
    where datname ~ '^kassa_template_[0-9a-f]{16}$' and datname <> ${current}`
  const newestFirst = others.sort((left, right) => (right.made ?? '').localeCompare(left.made ?? ''))
  for (const { datname } of newestFirst.slice(OTHER_TEMPLATES_KEPT)) {
    await admin.unsafe(`drop database if exists "${datname}"`).catch(() => {})
  }
}

async function makeTemplateDatabase(url: string, name: string): Promise<string> {
  const admin = postgres(url, { max: 1, onnotice: () => {} })
  try {
    await admin`select pg_advisory_lock(${TEMPLATE_LOCK_ID})`
    const [found] = await admin<{ exists: boolean }[]>`select exists (select 1 from pg_database where datname = ${name}) as exists`
    if (found?.exists !== true) {
      // Under the lock no other process is making one: a scratch left here was a killed process's.
      const left = await admin<{ datname: string }[]>`select datname from pg_database where starts_with(datname, ${`${name}_`})`
      for (const { datname } of left) await admin.unsafe(`drop database if exists "${datname}" with (force)`)
      const scratch = `${name}_${process.pid}`
      await admin.unsafe(`create database "${scratch}"`)
      const handle = await openDatabase({ databaseUrl: withDatabaseName(url, scratch), embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 })
      try {
        await runMigrations(handle, withDatabaseName(url, scratch))
      } finally {
        await handle.close()
      }
      await admin.unsafe(`alter database "${scratch}" rename to "${name}"`)
      await admin.unsafe(`comment on database "${name}" is 'kassa test template, made ${new Date().toISOString()}'`)
      await dropOldTemplates(admin, name)
    }
    await admin`select pg_advisory_unlock(${TEMPLATE_LOCK_ID})`
    return name
  } finally {
    await admin.end()
  }
}
