/**
 * CPU per authorization, in process: the whole request (`POST /v1/payments/authorize`) through
 * `kassa.handle(new Request(...))`, the way Bun.serve hands it over minus the socket (the
 * authorization answered in front of Elysia; AUTHCPU_THROUGH=app sends it through the app's own
 * Elysia route instead, `app.handle`). Figures only: nothing here passes or fails.
 *
 * It builds the app with `createApp(configForTests({ rateLimitStore: 'memory' }))`, creates an org,
 * a test key, and funded accounts through the API, then keeps AUTHCPU_CONCURRENCY requests in flight
 * for AUTHCPU_DURATION_MS and prints the process's CPU time (user + system) and wall time per request,
 * and the writer's batches over the run with their operations each: the main thread's cost per
 * request falls with the batch size (a batch has fixed costs), so runs compare only at like sizes.
 *
 * Database: embedded PGlite by default, whose own work runs in this process and dominates the CPU
 * figure. With AUTHCPU_POSTGRES=1 it uses a throwaway database on the Postgres server
 * (DATABASE_URL, or the local default), reached over its Unix socket when it has one, as the HTTP
 * benchmark's server reaches it (BENCH_PG_SOCKET, see bench/support.ts), so the CPU figure is the
 * server process's own share, as under the real load, database excluded.
 *
 * For attribution only, AUTHCPU_WRITER=skip replaces the ledger writer's `enqueue` with an immediate
 * success once the accounts are funded: nothing of the authorizations is written, and the figure is
 * the request path alone (auth, rate count, body, decision, rows built for the writer), without
 * the writer's statements and the database driver. Never a figure of the product: it skips durability.
 *
 * Settings: AUTHCPU_DURATION_MS (default 3000, after a 1000 ms warm-up), AUTHCPU_CONCURRENCY
 * (default 32), AUTHCPU_ACCOUNTS (default 16), AUTHCPU_IDEMPOTENCY=1 to send an Idempotency-Key with
 * every request, AUTHCPU_AMOUNT (default 1.25; an amount past the per-payment limit, such as
 * 100000000, measures the decline path: every request declined with limit_exceeded and recorded),
 * AUTHCPU_SHED=1 to shed every request (needs AUTHCPU_POSTGRES=1, where shedding is on): what a
 * request costs the thread past capacity, refused 429 rate_limited before its body is read.
 * AUTHCPU_RATE_LIMITED=1 sets the organization's limit to one request a minute once it is funded,
 * so every request is refused 429 rate_limited by the rate limiter: what a caller past its limit
 * costs the thread.
 *
 * Profile it:
 *   ./node_modules/.bin/bun --cpu-prof-md --cpu-prof-dir=/tmp/hotcpu bench/authorize-cpu.ts
 * and read the markdown (Hot Functions, Call Tree) for the JS outside db/ and the ledger writer.
 */
import { EMBEDDED_IN_MEMORY, openDatabase, type DatabaseHandle } from '../db/client.ts'
import { createApp } from '../server/app.ts'
import { configForTests } from '../test/support/config.ts'
import { createBenchDatabase, inProcessFundedOrg, mainThreadCpuMs, skipLedgerWrites, type BenchDatabase } from './support.ts'

const DURATION_MS = Number(process.env.AUTHCPU_DURATION_MS ?? 3000)
const WARMUP_MS = 1000
const CONCURRENCY = Number(process.env.AUTHCPU_CONCURRENCY ?? 32)
const ACCOUNTS = Number(process.env.AUTHCPU_ACCOUNTS ?? 16)
const USE_POSTGRES = process.env.AUTHCPU_POSTGRES === '1'
const WITH_IDEMPOTENCY = process.env.AUTHCPU_IDEMPOTENCY === '1'
const SKIP_WRITER = process.env.AUTHCPU_WRITER === 'skip'
const AMOUNT = process.env.AUTHCPU_AMOUNT ?? '1.25'
const SHED_ALL = process.env.AUTHCPU_SHED === '1'
const RATE_LIMITED = process.env.AUTHCPU_RATE_LIMITED === '1'
const BASE = 'http://kassa.bench'

let benchDatabase: BenchDatabase | undefined
let database: DatabaseHandle | undefined
let databaseUrl: string | undefined
if (USE_POSTGRES) {
  benchDatabase = await createBenchDatabase('authcpu')
  databaseUrl = benchDatabase.serverEnv.DATABASE_URL
} else {
  database = await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 })
}
const kassa = await createApp(configForTests({ rateLimitStore: 'memory', databaseUrl, webhookDelivery: false, loadShedding: SHED_ALL }), database ? { database } : {})
const { app } = kassa
const handle = process.env.AUTHCPU_THROUGH === 'app' ? (request: Request) => app.handle(request) : (request: Request) => kassa.handle(request)

const { orgId, key, accounts } = await inProcessFundedOrg(kassa, ACCOUNTS, '10000000')
if (RATE_LIMITED) {
  const limited = await app.handle(
    new Request(`${BASE}/ops/v1/orgs/${orgId}/limits`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${kassa.runtime.operatorToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ rateLimitPerMinute: 1 }),
    }),
  )
  if (limited.status !== 200) throw new Error(`could not lower the organization's limit: ${limited.status} ${await limited.text()}`)
}
const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
if (SKIP_WRITER) skipLedgerWrites(kassa)
if (SHED_ALL) {
  const shedder = kassa.runtime.shedder
  if (shedder === undefined) throw new Error('AUTHCPU_SHED=1 needs AUTHCPU_POSTGRES=1: shedding is on only on a Postgres server')
  // Every request shed, as while the loop runs late tick after tick: the share at 1, held there.
  for (let tick = 0; tick < 8; tick++) shedder.observe(1000)
  shedder.observe = () => {}
}

let sequence = 0
function authorizeRequest(): Request {
  const accountId = accounts[sequence % accounts.length]!
  const body = JSON.stringify({ accountId, asset: 'USDC', amount: AMOUNT, merchant: { name: 'Coffee', mcc: '5814' } })
  // As over HTTP, where a client sends a fixed body with its Content-Length (a Request built in
  // process has none unless told).
  const requestHeaders: Record<string, string> = { ...headers, 'content-length': String(Buffer.byteLength(body)) }
  if (WITH_IDEMPOTENCY) requestHeaders['idempotency-key'] = `cpu-${sequence}-${Date.now()}`
  sequence++
  return new Request(`${BASE}/v1/payments/authorize`, { method: 'POST', headers: requestHeaders, body })
}

interface Tally {
  answered: number
  approved: number
  other: Map<string, number>
}

async function drive(durationMs: number): Promise<Tally> {
  const tally: Tally = { answered: 0, approved: 0, other: new Map() }
  const until = performance.now() + durationMs
  const worker = async () => {
    while (performance.now() < until) {
      const response = await handle(authorizeRequest())
      const body = (await response.json()) as { state?: string; failureCode?: string; error?: { code: string } }
      tally.answered++
      if (response.status === 201 && body.state === 'authorized') tally.approved++
      else {
        const kind = `${response.status} ${body.failureCode ?? body.error?.code ?? body.state}`
        tally.other.set(kind, (tally.other.get(kind) ?? 0) + 1)
      }
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return tally
}

await drive(WARMUP_MS)
const writer = kassa.runtime.ledger.writer
const batchesBefore = writer.committedBatches
const operationsBefore = writer.committedOperations
const cpuBefore = process.cpuUsage()
const mainBefore = mainThreadCpuMs()
const wallBefore = performance.now()
const tally = await drive(DURATION_MS)
const wallMs = performance.now() - wallBefore
const cpu = process.cpuUsage(cpuBefore)
const mainThreadMs = mainThreadCpuMs() - mainBefore
const batches = writer.committedBatches - batchesBefore
const operations = writer.committedOperations - operationsBefore
await kassa.runtime.ledger.drain()
await kassa.close()
await benchDatabase?.drop()

const cpuMicros = cpu.user + cpu.system
console.log(
  JSON.stringify(
    {
      database: USE_POSTGRES ? 'postgres' : 'pglite',
      writer: SKIP_WRITER ? 'skipped (attribution only)' : 'real',
      idempotencyKey: WITH_IDEMPOTENCY,
      concurrency: CONCURRENCY,
      answered: tally.answered,
      approved: tally.approved,
      other: Object.fromEntries(tally.other),
      perSecond: Math.round((tally.answered / wallMs) * 1000),
      cpuMicrosPerRequest: Math.round((cpuMicros / tally.answered) * 10) / 10,
      userMicrosPerRequest: Math.round((cpu.user / tally.answered) * 10) / 10,
      systemMicrosPerRequest: Math.round((cpu.system / tally.answered) * 10) / 10,
      // The JavaScript thread alone; the rest of the process is the engine's compiler and collector threads.
      mainThreadMicrosPerRequest: Math.round(((mainThreadMs * 1000) / tally.answered) * 10) / 10,
      // The writer's batches over the measured run (none when it is skipped).
      batchesCommitted: batches,
      operationsPerBatch: batches === 0 ? 0 : Math.round((operations / batches) * 10) / 10,
    },
    null,
    2,
  ),
)
