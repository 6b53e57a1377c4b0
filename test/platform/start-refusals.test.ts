import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { withDatabaseName } from '../../db/client.ts'
import { SERVING_LOCK_KEYS } from '../../db/serving-lock.ts'
import { createTestDatabase, onPostgres, serverUrl, type TestDatabase } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'
import { refusedStart, startServerProcess, type ServerProcess } from '../support/server-process.ts'

const scratch = mkdtempSync(join(tmpdir(), 'kassa-start-refusals-'))
const servers: ServerProcess[] = []
const databases: TestDatabase[] = []
afterAll(async () => {
  for (const server of servers) await server.stop().catch(() => {})
  for (const database of databases) await database.drop()
  rmSync(scratch, { recursive: true, force: true })
}, 60_000)

/** Each of these starts real server processes, on a machine that may be busy. */
const SPAWN_TEST_TIMEOUT_MS = 60_000

/** A loopback port nothing listens on (it was free a moment ago). */
function closedPort(): number {
  const probe = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = probe.port
  probe.stop(true)
  return port
}

/** Polls `check` until it answers a value (a real wait: the server reconnects on its own timer). */
async function until<T>(check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  return (await eventually(check, { what: 'the server to answer', timeoutMs, intervalMs: 100, accept: (value) => value !== undefined })) as T
}

/** One line, naming the problem; no stack trace, no driver source excerpt. */
function expectOneClearLine(stderr: string, ...mentions: string[]): void {
  const lines = stderr.trim().split('\n')
  expect(lines).toHaveLength(1)
  for (const mention of mentions) expect(lines[0]).toContain(mention)
  expect(stderr).not.toMatch(/^\s+at /m)
  expect(stderr).not.toContain('node_modules')
}

describe('a start refused before it creates or prints anything', () => {
  test('DATABASE_URL at a closed port: one line naming the address, exit 2, no data folder, no operator token', async () => {
    const port = closedPort()
    const dataDir = join(scratch, 'closed-port')
    const refused = await refusedStart({ DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/kassa`, DATA_DIR: dataDir, OPERATOR_TOKEN: '' })
    expect(refused.code).toBe(2)
    expectOneClearLine(refused.stderr, 'DATABASE_URL', `127.0.0.1:${port}`, 'connection refused')
    expect(refused.stdout).not.toContain('operator token')
    expect(refused.stdout).not.toContain('listening')
    expect(existsSync(dataDir)).toBe(false)
  }, SPAWN_TEST_TIMEOUT_MS)

  test('a port in use: refused before a data folder is created or an operator token printed', async () => {
    const holder = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response('taken') })
    try {
      const dataDir = join(scratch, 'port-in-use')
      const refused = await refusedStart({ DATABASE_URL: '', PORT: String(holder.port), DATA_DIR: dataDir, OPERATOR_TOKEN: '' })
      expect(refused.code).toBe(1)
      expectOneClearLine(refused.stderr, `127.0.0.1:${holder.port}`, 'PORT')
      expect(refused.stdout).not.toContain('operator token')
      expect(refused.stdout).toBe('')
      expect(existsSync(dataDir)).toBe(false)
    } finally {
      holder.stop(true)
    }
  }, SPAWN_TEST_TIMEOUT_MS)

  test('KASSA_CLUSTER=1 on the embedded database is a configuration error: there is no database to share', async () => {
    const refused = await refusedStart({ DATABASE_URL: '', KASSA_CLUSTER: '1', KASSA_CLUSTER_SECRET: 'cluster-secret-0123456789abcdef0123456789', DATA_DIR: join(scratch, 'cluster') })
    expect(refused.code).toBe(2)
    expectOneClearLine(refused.stderr, 'configuration error', 'KASSA_CLUSTER', 'DATABASE_URL')
    expect(existsSync(join(scratch, 'cluster'))).toBe(false)
  }, SPAWN_TEST_TIMEOUT_MS)
})

describe('one server per Postgres database (needs DATABASE_URL)', () => {
  test.skipIf(!onPostgres)('DATABASE_URL naming a database that does not exist: one line naming it, exit 2', async () => {
    const missing = `kassa_missing_${Date.now().toString(36)}`
    const dataDir = join(scratch, 'missing-database')
    const refused = await refusedStart({ DATABASE_URL: withDatabaseName(serverUrl!, missing), DATA_DIR: dataDir, OPERATOR_TOKEN: '' })
    expect(refused.code).toBe(2)
    expectOneClearLine(refused.stderr, 'DATABASE_URL', `database "${missing}" does not exist`)
    expect(refused.stdout).not.toContain('operator token')
    expect(existsSync(dataDir)).toBe(false)
  }, SPAWN_TEST_TIMEOUT_MS)

  test.skipIf(!onPostgres)(
    'a second server on a database that has one refuses to start, naming the holder; the CLI still reads it; a stop frees it',
    async () => {
      const database = await createTestDatabase()
      databases.push(database)
      const env = { DATABASE_URL: database.databaseUrl!, OPERATOR_TOKEN: 'serving-lock-operator-token-0123456789abcdef', WEBHOOK_DELIVERY_PROCESS: 'false' }
      const first = await startServerProcess({ ...env, DATA_DIR: join(scratch, 'first') })
      servers.push(first)
      const firstPid = first.child.pid
      const listen = new URL(first.baseUrl).host

      const second = await refusedStart({ ...env, DATA_DIR: join(scratch, 'second') })
      expect(second.code).toBe(1)
      expectOneClearLine(second.stderr, 'already serves this database', `process ${firstPid}`, `listening on ${listen}`, 'started ')
      expect(second.stdout).not.toContain('listening')
      expect(existsSync(join(scratch, 'second'))).toBe(false)

      // Other clients of the database (the CLI, migrations, a reader) are not servers: not refused.
      const reader = postgres(database.databaseUrl!, { max: 1, onnotice: () => {} })
      try {
        const [holder] = await reader<Array<{ host: string; pid: number; listen: string }>>`select host, pid, listen from serving_instance`
        expect(holder).toMatchObject({ pid: firstPid, listen })
        const lockHolder = async () =>
          (
            await reader<Array<{ pid: number; application_name: string }>>`
              select a.pid, a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid
              where l.locktype = 'advisory' and l.database = (select oid from pg_database where datname = current_database()) and l.classid = ${SERVING_LOCK_KEYS[0]}::int::oid and l.objid = ${SERVING_LOCK_KEYS[1]}::int::oid and l.granted`
          )[0]
        const before = await lockHolder()
        expect(before!.application_name).toContain(`pid ${firstPid}`)

        // The holder's lock connection is cut (as by a Postgres restart): it takes the lock again.
        await reader`select pg_terminate_backend(${before!.pid})`
        const after = await until(async () => {
          const now = await lockHolder()
          return now !== undefined && now.pid !== before!.pid ? now : undefined
        }, 20_000)
        expect(after.application_name).toContain(`pid ${firstPid}`)
        expect((await refusedStart({ ...env, DATA_DIR: join(scratch, 'third') })).stderr).toContain(`process ${firstPid}`)
      } finally {
        await reader.end()
      }

      // A cluster server is refused there too: a lone server does not share its database.
      const clustered = await refusedStart({ ...env, DATA_DIR: join(scratch, 'clustered'), KASSA_CLUSTER: '1', KASSA_CLUSTER_SECRET: 'cluster-secret-0123456789abcdef0123456789' })
      expect(clustered.code).toBe(1)
      expectOneClearLine(clustered.stderr, 'already serves this database', `process ${firstPid}`, 'does not run in cluster mode')

      await first.stop()
      const next = await startServerProcess({ ...env, DATA_DIR: join(scratch, 'next') })
      servers.push(next)
      expect((await fetch(`${next.baseUrl}/health`)).status).toBe(200)
    },
    120_000,
  )
})
