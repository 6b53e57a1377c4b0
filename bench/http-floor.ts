/**
 * The floor under the server's CPU per answer: what Bun's HTTP alone costs a server per request on
 * this machine, with nothing of Kassa in it. Figures only: nothing here passes or fails.
 *
 * A child process answers `POST /v1/payments/authorize` with a fixed payment-shaped JSON after
 * parsing the body, either on bare `Bun.serve` or on a bare Elysia route with a TypeBox body
 * schema. The same keep-alive client as `npm run bench` (bench/http-client.ts) keeps
 * HTTP_FLOOR_CONNECTIONS requests in flight for HTTP_FLOOR_DURATION_MS after a 2 s warm-up, and
 * this prints the throughput and the CPU per request of the server (from /proc) and of the
 * generator. The authorization benchmark's "server µs" less this figure is Kassa's own work.
 *
 *   ./node_modules/.bin/bun bench/http-floor.ts          (both servers, one after the other)
 *   HTTP_FLOOR_SERVERS=bun ./node_modules/.bin/bun bench/http-floor.ts
 */
import { KeepAliveClient } from './http-client.ts'
import { processCpuMs } from './support.ts'

const DURATION_MS = Number(process.env.HTTP_FLOOR_DURATION_MS ?? 6000)
const CONNECTIONS = Number(process.env.HTTP_FLOOR_CONNECTIONS ?? 128)
const PORT = Number(process.env.HTTP_FLOOR_PORT ?? 39123)
const SERVERS = (process.env.HTTP_FLOOR_SERVERS ?? 'bun,elysia').split(',').filter((name) => name !== '')

const ANSWER = JSON.stringify({
  id: 'pay_01a2113608cd723a85567d72af086ef1',
  object: 'payment',
  state: 'authorized',
  amount: '1.00',
  asset: 'USDC',
  accountId: 'acct_01a211360851759a822561f30ded474f',
})
const REQUEST_BODY = JSON.stringify({ accountId: 'acct_01a211360851759a822561f30ded474f', asset: 'USDC', amount: '1.00' })

/** The child: one of the two bare servers, until it is killed. */
async function serve(kind: string): Promise<void> {
  if (kind === 'bun') {
    Bun.serve({
      port: PORT,
      async fetch(request) {
        await request.json()
        return new Response(ANSWER, { status: 201, headers: { 'content-type': 'application/json' } })
      },
    })
    return
  }
  const { Elysia, t } = await import('elysia')
  new Elysia()
    .post(
      '/v1/payments/authorize',
      ({ set }) => {
        set.status = 201
        return JSON.parse(ANSWER) as unknown
      },
      { body: t.Object({ accountId: t.String(), asset: t.String(), amount: t.String() }) },
    )
    .listen(PORT)
}

async function measure(kind: string): Promise<void> {
  const server = Bun.spawn([process.execPath, import.meta.path, 'serve', kind], { stdout: 'inherit', stderr: 'inherit' })
  try {
    const client = new KeepAliveClient(`http://127.0.0.1:${PORT}`)
    for (let attempt = 0; ; attempt++) {
      const ready = await fetch(`http://127.0.0.1:${PORT}/v1/payments/authorize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: REQUEST_BODY }).then(
        () => true,
        () => false,
      )
      if (ready) break
      if (attempt >= 100) throw new Error(`the ${kind} server did not start`)
      await Bun.sleep(50)
    }
    const request = client.prepare('POST', '/v1/payments/authorize', { 'content-type': 'application/json', authorization: 'Bearer sk_test_floor' }, REQUEST_BODY)
    let stopped = false
    let answered = 0
    const loop = async () => {
      while (!stopped) {
        await client.send(request)
        answered += 1
      }
    }
    const loops = Array.from({ length: CONNECTIONS }, loop)
    await Bun.sleep(2000)
    const serverBefore = processCpuMs(server.pid)
    const generatorBefore = process.cpuUsage()
    const answeredBefore = answered
    const startedAt = performance.now()
    await Bun.sleep(DURATION_MS)
    const serverMs = processCpuMs(server.pid) - serverBefore
    const generator = process.cpuUsage(generatorBefore)
    const count = answered - answeredBefore
    const elapsedMs = performance.now() - startedAt
    stopped = true
    await Promise.all(loops)
    client.close()
    console.log(
      `${kind.padEnd(6)} ${Math.round((count * 1000) / elapsedMs)} requests/s | server ${((serverMs * 1000) / count).toFixed(1)} µs per request | generator ${((generator.user + generator.system) / count).toFixed(1)} µs per request`,
    )
  } finally {
    server.kill()
    await server.exited
  }
}

if (process.argv[2] === 'serve') {
  await serve(process.argv[3] ?? 'bun')
} else {
  console.log(`HTTP floor: ${CONNECTIONS} keep-alive connections, ${DURATION_MS} ms per server after a 2 s warm-up, ${navigator.hardwareConcurrency} cores`)
  for (const kind of SERVERS) await measure(kind)
}
