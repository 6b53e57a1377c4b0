import { afterAll, describe, expect, test } from 'bun:test'
import postgres from 'postgres'
import { socketOf, withDatabaseName } from '../db/client.ts'
import { createApp } from '../server/app.ts'
import { ConfigError, loadConfig, WARM_UP_AUTHORIZATIONS_DEFAULT } from '../server/config.ts'
import { configForTests } from './support/config.ts'
import { warmUp, warmUpDatabaseCreatedMs, warmUpSummary, WARM_UP_DATABASE_PREFIX } from '../server/warm-up.ts'
import { createTestDatabase, onPostgres, serverUrl, type TestDatabase } from './support/db.ts'
import { jsonClient, spawnServerProcess, startServerProcess, type ServerProcess } from './support/server-process.ts'
import { eventually } from './support/eventually.ts'

const OPERATOR_TOKEN = 'warm-up-operator-token-0123456789abcdef012345'
const HOUR_MS = 60 * 60 * 1000

const databases: TestDatabase[] = []
const servers: ServerProcess[] = []

afterAll(async () => {
  for (const server of servers) await server.stop()
  for (const database of databases) await database.drop()
})

function admin(url = serverUrl!) {
  const { url: plain, host } = socketOf(url)
  return postgres(plain, { ...(host === undefined ? {} : { host }), max: 1, onnotice: () => {} })
}

/**
 * Of the named databases, those that exist. The shared Postgres has other users, whose servers warm
 * up too: a test looks only at databases it knows to be its own, never at every warm-up database.
 */
async function existing(names: string[]): Promise<string[]> {
  if (names.length === 0) return []
  const sql = admin()
  try {
    const rows = await sql<{ datname: string }[]>`select datname from pg_database where datname = any(${names}) order by datname`
    return rows.map((row) => row.datname)
  } finally {
    await sql.end()
  }
}

/** Warm-up databases named with `nowMs` (a warm-up given that time names its database so). */
async function namedWith(nowMs: number): Promise<string[]> {
  const sql = admin()
  try {
    const rows = await sql<{ datname: string }[]>`select datname from pg_database where starts_with(datname, ${`${WARM_UP_DATABASE_PREFIX}${nowMs.toString(36)}_`})`
    return rows.map((row) => row.datname)
  } finally {
    await sql.end()
  }
}

/** The throwaway database a real server named in its start log, once it has. */
function namedInOutput(output: string): string | undefined {
  return /kassa: warm-up database: (\S+)/.exec(output)?.[1]
}

async function publicTables(databaseUrl: string): Promise<number> {
  const sql = admin(databaseUrl)
  try {
    const [row] = await sql<{ count: number }[]>`select count(*)::int as count from information_schema.tables where table_schema = 'public'`
    return row!.count
  } finally {
    await sql.end()
  }
}

async function newDatabase(): Promise<TestDatabase> {
  const database = await createTestDatabase({ bare: true })
  databases.push(database)
  return database
}

describe('the warm-up setting', () => {
  test(`defaults to ${WARM_UP_AUTHORIZATIONS_DEFAULT} on Postgres and none on the embedded database`, () => {
    expect(loadConfig({ DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/kassa' }).warmUpAuthorizations).toBe(WARM_UP_AUTHORIZATIONS_DEFAULT)
    expect(loadConfig({ DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/kassa', WARM_UP_AUTHORIZATIONS: '0' }).warmUpAuthorizations).toBe(0)
    expect(loadConfig({}).warmUpAuthorizations).toBe(0)
    expect(loadConfig({ WARM_UP_AUTHORIZATIONS: '0' }).warmUpAuthorizations).toBe(0)
  })

  test('a warm-up asked of the embedded database, or a count that is not one, stops the start naming the variable', () => {
    for (const env of [{ WARM_UP_AUTHORIZATIONS: '100' }, { DATABASE_URL: 'postgres://postgres@127.0.0.1/kassa', WARM_UP_AUTHORIZATIONS: 'many' }, { DATABASE_URL: 'postgres://postgres@127.0.0.1/kassa', WARM_UP_AUTHORIZATIONS: '100001' }]) {
      expect(() => loadConfig(env)).toThrow(ConfigError)
      expect(() => loadConfig(env)).toThrow('WARM_UP_AUTHORIZATIONS')
    }
  })

  test('what the server prints of it', () => {
    expect(warmUpSummary(configForTests(), undefined)).toBe('none (the embedded database)')
    expect(warmUpSummary(configForTests({ databaseUrl: 'postgres://postgres@127.0.0.1/kassa' }), undefined)).toBe('off (WARM_UP_AUTHORIZATIONS=0)')
    const config = configForTests({ databaseUrl: 'postgres://postgres@127.0.0.1/kassa' })
    expect(warmUpSummary(config, { authorizations: 8000, approved: 8000, elapsedMs: 5712, leftoversDropped: [] })).toBe(
      '8,000 authorizations one at a time (8,000 approved) on a throwaway database, 5.7 s',
    )
    expect(warmUpSummary(config, { authorizations: 0, approved: 0, elapsedMs: 3, leftoversDropped: ['kassa_warmup_a_b'], skipped: 'could not create a throwaway database (permission denied)' })).toBe(
      'skipped: could not create a throwaway database (permission denied); dropped 1 left behind by an earlier start',
    )
  })

  test('warm-up databases are named with the time they were made, and only such names are read as theirs', () => {
    const now = 1_795_000_000_000
    expect(warmUpDatabaseCreatedMs(`kassa_warmup_${now.toString(36)}_0a1b2c3d`)).toBe(now)
    expect(warmUpDatabaseCreatedMs('kassa_warmup_')).toBeUndefined()
    expect(warmUpDatabaseCreatedMs('kassa_warmup_notes')).toBeUndefined()
    expect(warmUpDatabaseCreatedMs(`kassa_warmup_${now.toString(36)}_X`)).toBeUndefined()
    expect(warmUpDatabaseCreatedMs('kassa_test_abc_def')).toBeUndefined()
    expect(withDatabaseName('postgres://postgres@localhost/kassa?host=/var/run/postgresql', 'other')).toBe('postgres://postgres@localhost/other?host=/var/run/postgresql')
  })
})

describe('the warm-up without a database to reach', () => {
  test('is skipped, saying why, and the start goes on to meet the database itself', async () => {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    const result = await warmUp(configForTests({ databaseUrl: 'postgres://postgres@127.0.0.1:1/kassa' }), createApp, { count: 10 })
    expect(result.authorizations).toBe(0)
    expect(result.skipped).toStartWith('could not reach the database (')
  })
})

describe('the warm-up on Postgres (needs DATABASE_URL)', () => {
  test.skipIf(!onPostgres)('approves its authorizations on a throwaway database, drops it, and leaves the server\'s database untouched', async () => {
    const database = await newDatabase()
    const created: string[] = []
    const result = await warmUp(configForTests({ databaseUrl: database.databaseUrl }), createApp, { count: 300, onCreated: (name) => created.push(name) })
    expect(result.skipped).toBeUndefined()
    expect(result.authorizations).toBe(300)
    expect(result.approved).toBe(300)
    expect(result.elapsedMs).toBeGreaterThan(0)
    expect(created).toHaveLength(1)
    expect(await existing(created)).toEqual([])
    // Not migrated, not written: the server's own database has no table at all.
    expect(await publicTables(database.databaseUrl!)).toBe(0)
  })

  test.skipIf(!onPostgres)('drops what a killed start left behind once it is an hour old, and leaves a younger one (another server\'s, under way)', async () => {
    const database = await newDatabase()
    const now = Date.now()
    const old = `${WARM_UP_DATABASE_PREFIX}${(now - 2 * HOUR_MS).toString(36)}_0ddba11`
    const young = `${WARM_UP_DATABASE_PREFIX}${(now - 60_000).toString(36)}_5ca1ab1e`
    const sql = admin()
    try {
      await sql.unsafe(`create database "${old}"`)
      await sql.unsafe(`create database "${young}"`)
      const result = await warmUp(configForTests({ databaseUrl: database.databaseUrl }), createApp, { count: 1, nowMs: now })
      expect(result.skipped).toBeUndefined()
      expect(result.leftoversDropped).toEqual([old])
      expect(await existing([old, young])).toEqual([young])
    } finally {
      await sql.unsafe(`drop database if exists "${old}" with (force)`)
      await sql.unsafe(`drop database if exists "${young}" with (force)`)
      await sql.end()
    }
  })

  test.skipIf(!onPostgres)('without the privilege to create a database it is skipped, saying why, and nothing is created', async () => {
    const database = await newDatabase()
    const role = `kassa_warmup_role_${Date.now().toString(36)}`
    const sql = admin()
    try {
      await sql.unsafe(`create role "${role}" login nocreatedb nosuperuser`)
      const asRole = new URL(database.databaseUrl!)
      asRole.username = role
      const nowMs = Date.now()
      const created: string[] = []
      const result = await warmUp(configForTests({ databaseUrl: asRole.toString() }), createApp, { count: 10, nowMs, onCreated: (name) => created.push(name) })
      expect(result.authorizations).toBe(0)
      expect(result.skipped).toContain('could not create a throwaway database')
      expect(result.skipped).toContain('permission denied')
      expect(created).toEqual([])
      expect(await namedWith(nowMs)).toEqual([])
    } finally {
      await sql.unsafe(`drop role if exists "${role}"`)
      await sql.end()
    }
  })

  test.skipIf(!onPostgres)('a stop asked for during it ends it early, closes its instance and drops its database', async () => {
    const database = await newDatabase()
    const stop = new AbortController()
    const created: string[] = []
    // Stopped once its database exists and its authorizations are under way.
    const result = await warmUp(configForTests({ databaseUrl: database.databaseUrl }), createApp, {
      count: 100_000,
      signal: stop.signal,
      onCreated: (name) => {
        created.push(name)
        setTimeout(() => stop.abort('a test stop'), 200)
      },
    })
    expect(result.authorizations).toBeLessThan(100_000)
    expect(result.skipped).toBe(`stopped after ${result.authorizations} authorizations (a test stop)`)
    expect(created).toHaveLength(1)
    expect(await existing(created)).toEqual([])
  })

  test.skipIf(!onPostgres)('the real server stopped (SIGTERM) while it warms up exits cleanly without listening and leaves no database behind', async () => {
    const database = await newDatabase()
    const child = spawnServerProcess({ DATABASE_URL: database.databaseUrl!, OPERATOR_TOKEN, SERVICE_ENV: 'sandbox', WARM_UP_AUTHORIZATIONS: '100000' })
    let printedSoFar = ''
    const stdout = (async () => {
      const decoder = new TextDecoder()
      for await (const chunk of child.stdout) printedSoFar += decoder.decode(chunk)
    })()
    const output = Promise.all([stdout, new Response(child.stderr).text()]).then(([, err]) => printedSoFar + err)
    try {
      const name = await eventually(() => namedInOutput(printedSoFar) ?? (child.exitCode !== null ? 'exited' : undefined), { what: 'the warm-up database named', timeoutMs: 30_000 })
      expect(await existing([name!])).toEqual([name!])
      child.kill('SIGTERM')
      const code = await Promise.race([child.exited, Bun.sleep(20_000).then(() => 'still running')])
      expect(code).toBe(0)
      const printed = await output
      expect(printed).toMatch(/kassa: warm-up: skipped: stopped after \d+ authorizations \(SIGTERM\)/)
      expect(printed).toContain('kassa: SIGTERM while warming up, not started')
      expect(printed).not.toContain('listening on')
      expect(await existing([name!])).toEqual([])
    } finally {
      if (child.exitCode === null) child.kill(9)
    }
  })

  test.skipIf(!onPostgres)('the real server warms up before it listens, says so, and serves partners from a database without a trace of it', async () => {
    const database = await newDatabase()
    const server = await startServerProcess({ DATABASE_URL: database.databaseUrl!, OPERATOR_TOKEN, SERVICE_ENV: 'sandbox', WARM_UP_AUTHORIZATIONS: '200' })
    servers.push(server)
    const output = server.output()
    expect(output).toContain('kassa: warm-up: 200 authorizations one at a time (200 approved) on a throwaway database')
    // The warm-up's line comes before the server listens.
    expect(output.indexOf('kassa: warm-up:')).toBeLessThan(output.indexOf('listening on'))
    const name = namedInOutput(output)
    expect(name).toStartWith(WARM_UP_DATABASE_PREFIX)
    expect(await existing([name!])).toEqual([])

    const ops = jsonClient(() => server.baseUrl, OPERATOR_TOKEN)
    const orgs = await ops('GET', '/ops/v1/orgs')
    expect(orgs.status).toBe(200)
    expect(orgs.body.orgs).toEqual([])
    const org = await ops('POST', '/ops/v1/orgs', { name: 'After the warm-up' })
    expect(org.status).toBe(201)
    const partner = jsonClient(() => server.baseUrl, org.body.keys.find((key: { type: string }) => key.type === 'test').key)
    const account = await partner('POST', '/v1/accounts', { externalId: 'first-customer' })
    expect(account.status).toBe(201)
    expect((await partner('POST', `/v1/sandbox/accounts/${account.body.id}/fund`, { asset: 'USDC', amount: '100' })).status).toBe(201)
    const payment = await partner('POST', '/v1/payments/authorize', { accountId: account.body.id, asset: 'USDC', amount: '12.50' })
    expect(payment.status).toBe(201)
    expect(payment.body.state).toBe('authorized')
    const events = await partner('GET', '/v1/events')
    expect(events.status).toBe(200)
    expect(events.body.events.map((event: { type: string }) => event.type).sort()).toEqual(['account.created', 'account.funded', 'payment.authorized'].sort())
  })
})
