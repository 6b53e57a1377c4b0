import { createApp, type Kassa } from '../../server/app.ts'
import { type Config } from '../../server/config.ts'
import { configForTests } from './config.ts'
import type { RuntimeOptions } from '../../server/runtime.ts'
import { createTestDatabase, type TestDatabase } from './db.ts'

export interface TestApp {
  kassa: Kassa
  database: TestDatabase
  config: Config
  /** Sends a request through `kassa.handle` (as a listening server answers it); a JSON body is serialized and typed. */
  call(method: string, path: string, options?: CallOptions): Promise<TestResponse>
  /** Calls the operator API with the operator token. */
  ops(method: string, path: string, body?: unknown): Promise<TestResponse>
  createOrg(name?: string): Promise<TestOrg>
  close(): Promise<void>
}

export interface CallOptions {
  key?: string
  body?: unknown
  headers?: Record<string, string>
  rawBody?: string
}

export interface TestResponse {
  status: number
  headers: Headers
  body: any
}

export interface TestOrg {
  id: string
  testKey: string
  testKeyId: string
  publishableKey: string
  publishableKeyId: string
}

/** Sends a request to an app through `kassa.handle`; a JSON body is serialized and the answer parsed. */
export async function callApp(kassa: Kassa, method: string, path: string, options: CallOptions = {}): Promise<TestResponse> {
  const headers = new Headers(options.headers)
  if (options.key !== undefined) headers.set('authorization', `Bearer ${options.key}`)
  let body: string | undefined = options.rawBody
  if (options.body !== undefined) {
    body = JSON.stringify(options.body)
    if (!headers.has('content-type')) headers.set('content-type', 'application/json')
  }
  const response = await kassa.handle(new Request(`http://kassa.test${path}`, { method, headers, body }))
  const text = await response.text()
  let parsed: unknown = text
  try {
    parsed = text === '' ? undefined : JSON.parse(text)
  } catch {
    // Not JSON (an HTML page); the raw text is the body.
  }
  return { status: response.status, headers: response.headers, body: parsed }
}

/**
 * A second instance on the test app's database, as after a restart: the first instance's loops
 * (its sweepers included) are stopped first, so the second owns them. The caller stops the second's
 * loops (`kassa.runtime.stoppers`) when done.
 */
export async function restartOnSameDatabase(app: TestApp): Promise<Kassa> {
  await app.kassa.runtime.ledger.drain()
  for (const stop of app.kassa.runtime.stoppers.splice(0)) await stop()
  return createApp(configForTests({ databaseUrl: app.config.databaseUrl }), { database: await app.database.open() })
}

/** `runtimeOptions` can pin the wall clock (`wallClockMs`) for tests of time windows. */
export async function startTestApp(overrides: Partial<Config> = {}, runtimeOptions: Omit<RuntimeOptions, 'database'> = {}): Promise<TestApp> {
  const database = await createTestDatabase()
  const config = configForTests({ databaseUrl: database.databaseUrl, ...overrides })
  const handle = await database.open()
  const kassa = await createApp(config, { ...runtimeOptions, database: handle })

  const call = (method: string, path: string, options: CallOptions = {}) => callApp(kassa, method, path, options)
  const ops = (method: string, path: string, body?: unknown) =>
    call(method, path, { body, headers: { authorization: `Bearer ${config.operatorToken}` } })

  return {
    kassa,
    database,
    config,
    call,
    ops,
    async createOrg(name = 'Test Org') {
      const response = await ops('POST', '/ops/v1/orgs', { name })
      if (response.status !== 201) throw new Error(`creating an org failed: ${JSON.stringify(response.body)}`)
      const keys = response.body.keys as Array<{ id: string; type: string; key: string }>
      const test = keys.find((key) => key.type === 'test')!
      const publishable = keys.find((key) => key.type === 'publishable')!
      return { id: response.body.id, testKey: test.key, testKeyId: test.id, publishableKey: publishable.key, publishableKeyId: publishable.id }
    },
    async close() {
      await kassa.close()
      await database.drop()
    },
  }
}
