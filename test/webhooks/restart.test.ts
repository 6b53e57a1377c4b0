import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createTestDatabase, onPostgres, type TestDatabase } from '../support/db.ts'
import { DEFAULT_WORKER_OPTIONS } from '../../server/modules/webhooks/worker.ts'
import { makeCertificate, startReceiver, type Certificate, type Receiver } from './receivers.ts'
import { startServerProcess } from '../support/server-process.ts'
import { eventually } from '../support/eventually.ts'

const OPERATOR_TOKEN = 'webhook-restart-operator-token-0123456789abcdef'
const IN_FLIGHT = DEFAULT_WORKER_OPTIONS.perEndpointMax
const EVENTS = IN_FLIGHT + 4

let database: TestDatabase | undefined
let dataDir: string | undefined
let server: Bun.Subprocess | undefined
let certificate: Certificate | undefined
let target: Receiver | undefined

afterAll(async () => {
  server?.kill(9)
  target?.stop()
  await database?.drop()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
  certificate?.remove()
})

/** Starts the real server (`bun server/main.ts`) and answers its base URL once it listens. */
async function startServer(env: Record<string, string>): Promise<string> {
  const started = await startServerProcess({ OPERATOR_TOKEN, ...env })
  server = started.child
  return started.baseUrl
}

async function send(base: string, method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: response.status, body: await response.json() }
}

test(`deliveries in flight and not yet attempted when the server is killed are delivered after a restart (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  certificate = makeCertificate()
  let hanging = true
  // While `hanging`, the receiver takes requests and never answers them: attempts stay in flight.
  target = startReceiver(certificate, () => (hanging ? new Promise<number>(() => {}) : 200))
  const env: Record<string, string> = { ALLOW_LOOPBACK_WEBHOOKS: 'true', WEBHOOK_CA_FILE: certificate.certFile }
  if (onPostgres) {
    database = await createTestDatabase()
    env.DATABASE_URL = database.databaseUrl!
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'kassa-webhook-restart-'))
    env.DATA_DIR = dataDir
  }
  let base = await startServer(env)
  const org = (await send(base, 'POST', '/ops/v1/orgs', OPERATOR_TOKEN, { name: 'Restart' })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  const endpoint = (await send(base, 'POST', '/v1/webhooks', key, { url: target.url, events: ['account.created'] })).body
  expect(endpoint.id).toMatch(/^wh_/)
  const eventIds: string[] = []
  for (let index = 0; index < EVENTS; index++) {
    const account = await send(base, 'POST', '/v1/accounts', key, { externalId: `restart-${index}` })
    expect(account.status).toBe(201)
  }
  const log = await send(base, 'GET', '/v1/events?types=account.created', key)
  eventIds.push(...log.body.events.map((event: { id: string }) => event.id))
  expect(eventIds).toHaveLength(EVENTS)

  // As many attempts in flight as the per-endpoint bound allows, the rest waiting their turn: then kill -9.
  await target.waitFor(() => target!.open >= IN_FLIGHT)
  server!.kill(9)
  await server!.exited
  const statusesAtKill = target.received.length
  expect(statusesAtKill).toBeLessThan(EVENTS)

  hanging = false
  base = await startServer(env)
  // Attempts cut short by the kill hold a 30 s lease on the organization's clock; moving the
  // sandbox clock past it makes them due now instead of waiting.
  expect((await send(base, 'POST', '/v1/sandbox/clock/advance', key, { seconds: 60 })).status).toBe(200)
  await target.waitFor((received) => eventIds.every((id) => received.some((entry) => entry.event.id === id)), 20_000)

  const deliveryStates = async () => (await send(base, 'GET', '/v1/events?types=account.created', key)).body.events.map((event: { deliveries: any[] }) => event.deliveries[0])
  const deliveries: Array<{ status: string; attempts: number; statusCode: number | null }> = await eventually(deliveryStates, {
    what: 'every delivery delivered',
    intervalMs: 50,
    accept: (states: Array<{ status: string } | undefined>) => states.every((delivery) => delivery?.status === 'delivered'),
  }).catch(deliveryStates)
  expect(deliveries.map((delivery) => delivery.status)).toEqual(Array(EVENTS).fill('delivered'))
  for (const delivery of deliveries) expect(delivery.statusCode).toBe(200)
  // The ones cut short count their lost attempt: at least once, never silently dropped.
  expect(deliveries.filter((delivery) => delivery.attempts === 2).length).toBeGreaterThanOrEqual(IN_FLIGHT)
}, 90_000)
