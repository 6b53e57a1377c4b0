import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import { createApp, type Kassa } from '../../server/app.ts'
import { configForTests } from '../support/config.ts'
import { RATE_WINDOW_MS } from '../../server/platform/rate-limit-store.ts'
import { createTestDatabase, onPostgres, type TestDatabase } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'

const REPO_ROOT = resolve(import.meta.dir, '../..')
const BUN = join(REPO_ROOT, 'node_modules/.bin/bun')
const OPERATOR_TOKEN = 'two-instances-operator-token-0123456789abcdef'
const START_TIMEOUT_MS = 30_000
/** The burst must fit in one window; with less than this left, wait for the next one. */
const WINDOW_MARGIN_MS = 15_000
const ORG_LIMIT = 50
const REQUESTS = 120

/**
 * One instance counting requests: a real server process, or a second runtime in this test's process
 * on the same database. Only one server process may serve a database (db/serving-lock.ts: a
 * second is refused until cluster mode exists), so the second instance is an app built by
 * `createApp` here, with its own Postgres pool, rate counter and NOTIFY listener: two processes
 * still count one key through one Postgres table, which is what this test proves.
 */
interface Instance {
  process?: Subprocess<'ignore', 'pipe', 'pipe'>
  app?: Kassa
  baseUrl: string
  output: string[]
}

const instances: Instance[] = []
let database: TestDatabase | undefined
let dataDir: string | undefined

afterAll(async () => {
  for (const instance of instances) {
    if (instance.app) {
      await instance.app.close()
      continue
    }
    instance.process!.kill('SIGTERM')
    const exited = await Promise.race([instance.process!.exited.then(() => true), Bun.sleep(5_000).then(() => false)])
    if (!exited) instance.process!.kill('SIGKILL')
  }
  await database?.drop()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
}, 60_000)

/** Starts `server/main.ts` on a free port and resolves once it says where it listens. */
async function startInstance(databaseUrl: string, name: string): Promise<Instance> {
  const child = Bun.spawn([BUN, 'server/main.ts'], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      RATE_LIMIT_STORE: 'postgres',
      WARM_UP_AUTHORIZATIONS: '0',
      OPERATOR_TOKEN,
      SERVICE_ENV: 'sandbox',
      DATA_DIR: join(dataDir!, name),
    },
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const output: string[] = []
  const instance: Instance = { process: child, baseUrl: '', output }
  instances.push(instance)
  void (async () => {
    for await (const chunk of child.stderr) output.push(new TextDecoder().decode(chunk))
  })()
  const listening = (async () => {
    const decoder = new TextDecoder()
    let text = ''
    for await (const chunk of child.stdout) {
      text += decoder.decode(chunk)
      output.push(text)
      const match = /listening on (http:\/\/[^\s]+)/.exec(text)
      if (match) return match[1]!
    }
    throw new Error(`${name} exited before listening:\n${output.join('')}`)
  })()
  const timeout = Bun.sleep(START_TIMEOUT_MS).then(() => {
    throw new Error(`${name} did not start within ${START_TIMEOUT_MS} ms:\n${output.join('')}`)
  })
  instance.baseUrl = await Promise.race([listening, timeout])
  return instance
}

/** A second instance on the same database, in this process: its own pool, rate counter and listener. */
async function startInProcessInstance(databaseUrl: string, name: string): Promise<Instance> {
  const app = await createApp(configForTests({ databaseUrl, rateLimitStore: 'postgres', operatorToken: OPERATOR_TOKEN, dataDir: join(dataDir!, name) }))
  const instance: Instance = { app, baseUrl: 'http://kassa.test', output: [] }
  instances.push(instance)
  return instance
}

async function request(instance: Instance, method: string, path: string, options: { key?: string; operator?: boolean; body?: unknown } = {}) {
  const headers: Record<string, string> = {}
  if (options.key) headers.authorization = `Bearer ${options.key}`
  if (options.operator) headers.authorization = `Bearer ${OPERATOR_TOKEN}`
  if (options.body !== undefined) headers['content-type'] = 'application/json'
  const init = { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) }
  const url = `${instance.baseUrl}${path}`
  const response = instance.app ? await instance.app.handle(new Request(url, init)) : await fetch(url, init)
  const text = await response.text()
  return { status: response.status, headers: response.headers, body: text === '' ? undefined : JSON.parse(text) }
}

/** Waits until `instance` answers `key` with the expected limit (it learns of changes by NOTIFY). */
async function waitForLimit(instance: Instance, key: string, limit: number): Promise<void> {
  await eventually(
    async () => {
      const response = await request(instance, 'GET', '/v1/sandbox/clock', { key })
      return { status: response.status, limit: response.headers.get('x-ratelimit-limit') }
    },
    { what: `the instance applying limit ${limit}`, timeoutMs: 10_000, intervalMs: 50, accept: (seen) => seen.status === 200 && seen.limit === String(limit) },
  )
}

async function waitForRoomInWindow(): Promise<void> {
  const leftMs = RATE_WINDOW_MS - (Date.now() % RATE_WINDOW_MS)
  if (leftMs < WINDOW_MARGIN_MS) await Bun.sleep(leftMs + 200)
}

describe('rate limits across instances', () => {
  test.skipIf(!onPostgres)(
    'a server process and a second instance in another process, on one Postgres database, admit exactly the limit between them (needs DATABASE_URL)',
    async () => {
      database = await createTestDatabase()
      dataDir = mkdtempSync(join(tmpdir(), 'kassa-instances-'))
      const databaseUrl = database.databaseUrl!
      const first = await startInstance(databaseUrl, 'first')

      const created = await request(first, 'POST', '/ops/v1/orgs', { operator: true, body: { name: 'Two Instances Org' } })
      expect(created.status).toBe(201)
      const orgId: string = created.body.id
      const burstKey: string = created.body.keys.find((key: { type: string }) => key.type === 'test').key
      // A second key of the same organization watches the limit without using up the burst key's count.
      const probe = await request(first, 'POST', `/ops/v1/orgs/${orgId}/keys`, { operator: true, body: { type: 'test', environment: 'sandbox' } })
      expect(probe.status).toBe(201)
      const probeKey: string = probe.body.key

      // The second instance starts after the organization exists, and hears of the new limit by NOTIFY.
      const second = await startInProcessInstance(databaseUrl, 'second')
      const limited = await request(first, 'PATCH', `/ops/v1/orgs/${orgId}/limits`, { operator: true, body: { rateLimitPerMinute: ORG_LIMIT } })
      expect(limited.status).toBe(200)
      await waitForLimit(first, probeKey, ORG_LIMIT)
      await waitForLimit(second, probeKey, ORG_LIMIT)

      await waitForRoomInWindow()
      const windowAtStart = Math.floor(Date.now() / RATE_WINDOW_MS)
      const responses = await Promise.all(
        Array.from({ length: REQUESTS }, (_, index) => request(index % 2 === 0 ? first : second, 'GET', '/v1/sandbox/clock', { key: burstKey })),
      )
      expect(Math.floor(Date.now() / RATE_WINDOW_MS)).toBe(windowAtStart)

      const admitted = responses.filter((response) => response.status === 200)
      const refused = responses.filter((response) => response.status === 429)
      expect(admitted).toHaveLength(ORG_LIMIT)
      expect(refused).toHaveLength(REQUESTS - ORG_LIMIT)
      // Each admitted request saw its own count: the shared counter never handed out a number twice.
      const remaining = admitted.map((response) => Number(response.headers.get('x-ratelimit-remaining'))).sort((a, b) => a - b)
      expect(remaining).toEqual(Array.from({ length: ORG_LIMIT }, (_, index) => index))
      for (const response of refused) {
        expect(response.body.error.code).toBe('rate_limited')
        expect(Number(response.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
        expect(response.headers.get('x-ratelimit-limit')).toBe(String(ORG_LIMIT))
      }
      // Each instance alone got more requests than the limit (REQUESTS / 2 > ORG_LIMIT), so counters
      // of their own would have admitted more than ORG_LIMIT in total: exactly ORG_LIMIT means one count.
      expect(REQUESTS / 2).toBeGreaterThan(ORG_LIMIT)
      // (Which instance admits which request depends on how each batches its counts: one batch of
      // one instance may take every remaining slot.)
    },
    60_000 + START_TIMEOUT_MS * 2,
  )
})
