/**
 * Webhook benchmark: a real server process on Postgres, closed-loop HTTP transfers (each commits one
 * `transfer.completed` event), once with no endpoint and once with 10 endpoints subscribed to every
 * event on 10 real HTTPS receivers. Reports events written per second and the lag from commit (the
 * moment the transfer's 201 arrived, which is sent only after COMMIT) to each delivery's arrival:
 * p50, p99, max. Prints figures and writes JSON and markdown to bench/results/. Nothing here passes
 * or fails.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import postgres from 'postgres'
import { withDatabaseName } from '../db/client.ts'
import { OPERATOR_TOKEN, percentile, startServer } from './support.ts'
import { createWebhookLoad, nowMs, type WebhookLoad } from './webhook-receivers.ts'

const SERVER_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 32)
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 8000)
const ENDPOINTS = 10
/** How long to wait after the load for the last deliveries. */
const DRAIN_MS_MAX = 60_000

interface RunResult {
  endpoints: number
  clients: number
  durationMs: number
  eventsWritten: number
  eventsPerSecond: number
  writeP50Ms: number
  writeP99Ms: number
  deliveriesExpected: number
  deliveriesArrived: number
  deliveriesPerSecond: number
  lagP50Ms: number | null
  lagP99Ms: number | null
  lagMaxMs: number | null
  drainMs: number | null
}


const round = (value: number) => Number(value.toFixed(1))


async function call(base: string, method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: response.status, body: await response.json() }
}

async function run(endpoints: number): Promise<RunResult> {
  const name = `kassa_bench_webhooks_${endpoints}_${Date.now().toString(36)}`
  const admin = postgres(SERVER_URL, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"`)
  const url = withDatabaseName(SERVER_URL, name)
  const load: WebhookLoad = createWebhookLoad(ENDPOINTS)
  const { base, process: child } = await startServer({ DATABASE_URL: url, ...load.serverEnv })
  try {
    const org = (await call(base, 'POST', '/ops/v1/orgs', OPERATOR_TOKEN, { name: 'Webhook bench' })).body
    const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
    await call(base, 'PATCH', `/ops/v1/orgs/${org.id}/limits`, OPERATOR_TOKEN, { rateLimitPerMinute: 10_000_000 })
    const accounts: string[] = []
    for (let index = 0; index < 16; index++) {
      const id = (await call(base, 'POST', '/v1/accounts', key, { externalId: `bench-${index}` })).body.id as string
      await call(base, 'POST', `/v1/sandbox/accounts/${id}/fund`, key, { asset: 'USDC', amount: '1000000' })
      accounts.push(id)
    }
    if (endpoints > 0) await load.register(base, key, ['transfer.*'])
    // Transfer id → when its 201 arrived (after COMMIT).
    const committedAt = new Map<string, number>()
    const writeLatencies: number[] = []
    let stop = false
    const client = async (index: number) => {
      let turn = index
      while (!stop) {
        const source = accounts[turn % accounts.length]!
        const destination = accounts[(turn + 1) % accounts.length]!
        turn += 1
        const started = nowMs()
        const response = await call(base, 'POST', '/v1/transfers', key, { sourceAccountId: source, destinationAccountId: destination, asset: 'USDC', amount: '1' })
        const finished = nowMs()
        if (response.status !== 201) continue
        committedAt.set(response.body.id, finished)
        writeLatencies.push(finished - started)
      }
    }
    const startedAt = nowMs()
    const clients = Array.from({ length: CLIENTS }, (_, index) => client(index))
    await Bun.sleep(DURATION_MS)
    stop = true
    await Promise.all(clients)
    const elapsed = nowMs() - startedAt
    const expected = committedAt.size * endpoints
    const transferDeliveries = () => load.deliveries.filter((delivery) => delivery.type === 'transfer.completed' && committedAt.has(String(delivery.data.id)))
    const drainStarted = nowMs()
    while (endpoints > 0 && transferDeliveries().length < expected && nowMs() - drainStarted < DRAIN_MS_MAX) await Bun.sleep(50)
    const arrived = transferDeliveries()
    const lags = arrived.map((delivery) => delivery.arrivedAtMs - committedAt.get(String(delivery.data.id))!).sort((a, b) => a - b)
    const lastArrival = arrived.reduce((latest, delivery) => Math.max(latest, delivery.arrivedAtMs), 0)
    writeLatencies.sort((a, b) => a - b)
    return {
      endpoints,
      clients: CLIENTS,
      durationMs: Math.round(elapsed),
      eventsWritten: committedAt.size,
      eventsPerSecond: Math.round((committedAt.size / elapsed) * 1000),
      writeP50Ms: round(percentile(writeLatencies, 0.5)),
      writeP99Ms: round(percentile(writeLatencies, 0.99)),
      deliveriesExpected: expected,
      deliveriesArrived: arrived.length,
      deliveriesPerSecond: endpoints > 0 && lastArrival > 0 ? Math.round((arrived.length / (lastArrival - startedAt)) * 1000) : 0,
      lagP50Ms: lags.length ? round(percentile(lags, 0.5)) : null,
      lagP99Ms: lags.length ? round(percentile(lags, 0.99)) : null,
      lagMaxMs: lags.length ? round(lags.at(-1)!) : null,
      drainMs: endpoints > 0 ? Math.round(Math.max(0, lastArrival - (startedAt + elapsed))) : null,
    }
  } finally {
    child.kill()
    await child.exited
    load.stop()
    await admin.unsafe(`drop database if exists "${name}" with (force)`)
    await admin.end()
  }
}

const results: RunResult[] = []
for (const endpoints of [0, ENDPOINTS]) {
  const result = await run(endpoints)
  console.log(result)
  results.push(result)
}
const show = (value: number | null) => (value === null ? '–' : String(value))
const table = [
  '| endpoints | clients | events written/s | write p50 ms | write p99 ms | deliveries arrived/expected | deliveries/s | lag p50 ms | lag p99 ms | lag max ms | drain after load ms |',
  '|---|---|---|---|---|---|---|---|---|---|---|',
  ...results.map(
    (result) =>
      `| ${result.endpoints} | ${result.clients} | ${result.eventsPerSecond} | ${result.writeP50Ms} | ${result.writeP99Ms} | ${result.deliveriesArrived}/${result.deliveriesExpected} | ${result.deliveriesPerSecond} | ${show(result.lagP50Ms)} | ${show(result.lagP99Ms)} | ${show(result.lagMaxMs)} | ${show(result.drainMs)} |`,
  ),
].join('\n')
console.log(`\nTransfers (one event each) over HTTP on Postgres, ${DURATION_MS} ms per run, lag = delivery arrival − the transfer's 201\n${table}`)
const folder = join(import.meta.dir, 'results')
mkdirSync(folder, { recursive: true })
const stamp = new Date().toISOString().replaceAll(':', '-')
writeFileSync(join(folder, `webhooks-${stamp}.json`), JSON.stringify({ at: new Date().toISOString(), results }, null, 2))
writeFileSync(join(folder, `webhooks-${stamp}.md`), `# Webhook delivery under write load (${new Date().toISOString()})\n\n${table}\n`)
