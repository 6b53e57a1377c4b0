/**
 * The floor under the server's CPU per answer: what Bun's HTTP alone costs a server per request on
 * this machine, and what Kassa's request path costs on top of it without the ledger writer. Figures
 * only: nothing here passes or fails.
 *
 * A child process answers `POST /v1/payments/authorize` on one of:
 * - `bun`: bare `Bun.serve`, parsing the body and answering a fixed payment-shaped JSON;
 * - `elysia`: a bare Elysia route with a TypeBox body schema, answering the same;
 * - `kassa`: Kassa's whole app (on Postgres, an organization with raised limits and 16 funded
 *   accounts) with the ledger writer's `enqueue` replaced by an immediate success once the
 *   accounts are funded. Every plugin, the decision and the answer run; nothing of the
 *   authorizations is written. For attribution only, never a figure of the product: it skips
 *   durability (`bench/authorize-cpu.ts` with AUTHCPU_WRITER=skip is the same cut in process);
 *   A listening Kassa answers authorizations in front of Elysia (server/modules/payments/front.ts);
 * - `kassa-route`: the same app answering them with its Elysia route instead (the app's `fetch`
 *   alone, as every other route is answered): what the front saves;
 * - `kassa-hooks`: the same app, through Elysia, answering the fixed payment from a last request
 *   hook, after its own request hooks (arrival, request id, operator and API-key authentication,
 *   rate limiting) and before routing, parsing, validation and the route. What `kassa-route` costs
 *   beyond it is the route: Elysia's steps for it, the body, the decision and the answer;
 * - `kassa-shed`: the same app with its load shedder shedding every authorization: what a refusal
 *   past capacity costs the server (429, in front of the app), the answer it gives most requests
 *   there.
 * The same keep-alive client as `npm run bench` (bench/http-client.ts) keeps
 * HTTP_FLOOR_CONNECTIONS requests in flight for HTTP_FLOOR_DURATION_MS after a 2 s warm-up, or,
 * with HTTP_FLOOR_RATE, sends that many a second from a warm pool, paced as the benchmark's open
 * loops (each server then wakes for the same requests, where a closed loop lets a slower server
 * carry more requests per wake). This prints the throughput and the CPU per request of the server
 * (all of it, and its main thread, from /proc) and of the generator. Answers other than an approval
 * (a refusal, for `kassa-shed`) are counted and printed. HTTP_FLOOR_BUN_ARGS adds arguments to the
 * server's `bun` (a profile:
 * `--cpu-prof --cpu-prof-md --cpu-prof-dir=/tmp/prof`, written when the run ends).
 *
 *   ./node_modules/.bin/bun bench/http-floor.ts          (bun, elysia and kassa, one after the other)
 *   HTTP_FLOOR_SERVERS=bun,kassa-hooks,kassa-route,kassa HTTP_FLOOR_RATE=8000 ./node_modules/.bin/bun bench/http-floor.ts
 */
import { KeepAliveClient, type HttpAnswer } from './http-client.ts'
import { createBenchDatabase, inProcessFundedOrg, paced, processCpuMs, processStat, skipLedgerWrites } from './support.ts'

const DURATION_MS = Number(process.env.HTTP_FLOOR_DURATION_MS ?? 6000)
const CONNECTIONS = Number(process.env.HTTP_FLOOR_CONNECTIONS ?? 128)
/**
 * The servers listen on HTTP_FLOOR_PORT, or by default on a port the kernel picks, reported back in
 * the ready line: a fixed default inside the ephemeral range (32768 to 60999 here) was found taken by
 * a client connection's own port after a load run, and the server could not start.
 */
const PORT = Number(process.env.HTTP_FLOOR_PORT ?? 0)
const SERVERS = (process.env.HTTP_FLOOR_SERVERS ?? 'bun,elysia,kassa').split(',').filter((name) => name !== '')
const RATE = Number(process.env.HTTP_FLOOR_RATE ?? 0)
/**
 * Kassa's servers run on a throwaway database on the Postgres server (DATABASE_URL, or the local
 * default; dropped afterwards), as the benchmark's do. HTTP_FLOOR_EMBEDDED=1 runs them on the
 * embedded in-memory PGlite instead. The writes are skipped either way, but PGlite's memory (about
 * 1 GB of WebAssembly memory and buffers once it has run initdb) counts in the engine's heap, which
 * sizes its collections by it: the server then allocates hundreds of megabytes between
 * collections, and every request touches fresh pages (docs/architecture.md, "The embedded database's memory").
 */
const POSTGRES = process.env.HTTP_FLOOR_EMBEDDED !== '1'
const SERVER_BUN_ARGS = (process.env.HTTP_FLOOR_BUN_ARGS ?? '').split(' ').filter((arg) => arg !== '')

const ANSWER = JSON.stringify({
  id: 'pay_01a2113608cd723a85567d72af086ef1',
  object: 'payment',
  state: 'authorized',
  amount: '1.00',
  asset: 'USDC',
  accountId: 'acct_01a211360851759a822561f30ded474f',
})
const REQUEST_BODY = JSON.stringify({ accountId: 'acct_01a211360851759a822561f30ded474f', asset: 'USDC', amount: '1.00' })

/** What the child tells the parent once it listens: for Kassa, the key and the accounts to authorize on. */
interface Ready {
  port: number
  key?: string
  accounts?: string[]
}

/** The child: one of the servers, until it is killed. Prints one line of JSON (`Ready`) once it listens. */
async function serve(kind: string): Promise<void> {
  if (kind === 'kassa' || kind === 'kassa-route' || kind === 'kassa-hooks' || kind === 'kassa-shed') {
    console.log(JSON.stringify(await serveKassa(kind)))
    return
  }
  if (kind === 'bun') {
    const server = Bun.serve({
      port: PORT,
      async fetch(request) {
        await request.json()
        return new Response(ANSWER, { status: 201, headers: { 'content-type': 'application/json' } })
      },
    })
    console.log(JSON.stringify({ port: server.port! } satisfies Ready))
    return
  }
  const { Elysia, t } = await import('elysia')
  const app = new Elysia()
    .post(
      '/v1/payments/authorize',
      ({ set }) => {
        set.status = 201
        return JSON.parse(ANSWER) as unknown
      },
      { body: t.Object({ accountId: t.String(), asset: t.String(), amount: t.String() }) },
    )
    .listen(PORT)
  console.log(JSON.stringify({ port: app.server!.port! } satisfies Ready))
}

/**
 * Kassa's app with the writer answering at once (see the header), listening on PORT; `kassa-route`
 * and `kassa-hooks` through Elysia alone (`kassa-hooks` answering from a last request hook),
 * `kassa-shed` shedding every authorization.
 */
async function serveKassa(kind: 'kassa' | 'kassa-route' | 'kassa-hooks' | 'kassa-shed'): Promise<Ready> {
  const { EMBEDDED_IN_MEMORY, openDatabase } = await import('../db/client.ts')
  const { createApp } = await import('../server/app.ts')
  const { configForTests } = await import('../test/support/config.ts')
  const databaseUrl = process.env.HTTP_FLOOR_CHILD_DATABASE_URL
  const database = databaseUrl === undefined ? await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 }) : undefined
  const kassa = await createApp(configForTests({ rateLimitStore: 'memory', webhookDelivery: false, databaseUrl }), database === undefined ? {} : { database })
  const org = await inProcessFundedOrg(kassa, 16, '10000000')
  skipLedgerWrites(kassa)
  // Request hooks run in the order they were added: this one runs after all of Kassa's.
  if (kind === 'kassa-hooks') kassa.app.onRequest(() => new Response(ANSWER, { status: 201, headers: { 'content-type': 'application/json' } }))
  if (kind === 'kassa-shed') {
    const { DEFAULT_SHEDDING, LoadShedder } = await import('../server/platform/load-shedder.ts')
    // Late from the first tick, every authorization shed; no clock feeds it, so it stays so.
    kassa.runtime.shedder = new LoadShedder({ ...DEFAULT_SHEDDING, lateMs: 0, lateTicks: 1, stepUp: 1, stepDown: 0, busyShare: 0 })
    kassa.runtime.shedder.observe(1)
  }
  if (kind === 'kassa-route' || kind === 'kassa-hooks') {
    // Compiled again: the app's handler was compiled (funding the accounts) before the hook was added.
    kassa.app.compile()
    const server = Bun.serve({ port: PORT, fetch: (request) => kassa.app.fetch(request) })
    return { ...org, port: server.port! }
  }
  kassa.app.listen({ port: PORT })
  return { ...org, port: kassa.app.server!.port! }
}

/** The child's first line of output. */
async function readyLine(stdout: ReadableStream<Uint8Array>): Promise<Ready> {
  const reader = stdout.getReader()
  const decoder = new TextDecoder()
  let text = ''
  while (!text.includes('\n')) {
    const { done, value } = await reader.read()
    if (done) throw new Error('the server ended before it was ready')
    text += decoder.decode(value, { stream: true })
  }
  reader.releaseLock()
  return JSON.parse(text.slice(0, text.indexOf('\n'))) as Ready
}

async function measure(kind: string): Promise<void> {
  const benchDatabase = POSTGRES && kind.startsWith('kassa') ? await createBenchDatabase('floor') : undefined
  const databaseEnv: Record<string, string> = benchDatabase === undefined ? {} : { HTTP_FLOOR_CHILD_DATABASE_URL: benchDatabase.url }
  const server = Bun.spawn([process.execPath, ...SERVER_BUN_ARGS, import.meta.path, 'serve', kind], { env: { ...process.env, ...databaseEnv }, stdout: 'pipe', stderr: 'inherit' })
  try {
    const ready = await readyLine(server.stdout)
    const client = new KeepAliveClient(`http://127.0.0.1:${ready.port}`)
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${ready.key ?? 'sk_test_floor'}` }
    const requests =
      ready.accounts === undefined
        ? [client.prepare('POST', '/v1/payments/authorize', headers, REQUEST_BODY)]
        : ready.accounts.map((accountId) =>
            client.prepare('POST', '/v1/payments/authorize', headers, JSON.stringify({ accountId, asset: 'USDC', amount: '1.25', merchant: { name: 'Coffee', mcc: '5814' } })),
          )
    let stopped = false
    let answered = 0
    let sent = 0
    const other = new Map<string, number>()
    const expected = kind === 'kassa-shed' ? (answer: HttpAnswer) => answer.status === 429 : (answer: HttpAnswer) => answer.status === 201 && answer.body.includes('"state":"authorized"')
    const tally = (answer: HttpAnswer) => {
      answered += 1
      if (!expected(answer)) {
        const kind = `${answer.status} ${answer.body.slice(0, 120)}`
        other.set(kind, (other.get(kind) ?? 0) + 1)
      }
    }
    const sendNext = () => client.send(requests[sent++ % requests.length]!)
    const loop = async () => {
      while (!stopped) tally(await sendNext())
    }
    const send = () => {
      void sendNext().then(tally)
    }
    let loops: Promise<unknown>[]
    if (RATE > 0) {
      // A budget's worth of connections, as the benchmark's open loops hold.
      await client.warm(Math.max(CONNECTIONS, Math.ceil(RATE / 2)))
      loops = [paced(RATE, DURATION_MS + 2000, send)]
    } else {
      loops = Array.from({ length: CONNECTIONS }, loop)
    }
    await Bun.sleep(2000)
    const serverBefore = processCpuMs(server.pid)
    const statBefore = processStat(server.pid)
    const mainBefore = processCpuMs(`${server.pid}/task/${server.pid}`)
    const generatorBefore = process.cpuUsage()
    const answeredBefore = answered
    const startedAt = performance.now()
    await Bun.sleep(DURATION_MS)
    const serverMs = processCpuMs(server.pid) - serverBefore
    const statAfter = processStat(server.pid)
    const mainMs = processCpuMs(`${server.pid}/task/${server.pid}`) - mainBefore
    const generator = process.cpuUsage(generatorBefore)
    const count = answered - answeredBefore
    const elapsedMs = performance.now() - startedAt
    stopped = true
    await Promise.all(loops)
    client.close()
    const perRequest = (ms: number) => ((ms * 1000) / count).toFixed(1)
    console.log(
      `${kind.padEnd(11)} ${Math.round((count * 1000) / elapsedMs)} requests/s | server ${perRequest(serverMs)} µs per request (main thread ${perRequest(mainMs)}) | generator ${((generator.user + generator.system) / count).toFixed(1)} µs per request`,
    )
    console.log(
      `${''.padEnd(11)} server: user ${perRequest(statAfter.userMs - statBefore.userMs)} µs, system ${perRequest(statAfter.systemMs - statBefore.systemMs)} µs, minor page faults ${((statAfter.minorFaults - statBefore.minorFaults) / count).toFixed(2)} per request`,
    )
    for (const [answer, times] of other) console.log(`       not an approval, ${times} times: ${answer}`)
  } finally {
    server.kill()
    await server.exited
    await benchDatabase?.drop()
  }
}

if (process.argv[2] === 'serve') {
  // Exits rather than dies on the parent's kill, so a profile asked for by HTTP_FLOOR_BUN_ARGS is written.
  process.on('SIGTERM', () => process.exit(0))
  await serve(process.argv[3] ?? 'bun')
} else {
  const load = RATE > 0 ? `${RATE} requests/s offered` : `${CONNECTIONS} keep-alive connections`
  console.log(`HTTP floor: ${load}, ${DURATION_MS} ms per server after a 2 s warm-up, ${navigator.hardwareConcurrency} cores`)
  for (const kind of SERVERS) await measure(kind)
}
