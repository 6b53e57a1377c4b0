/**
 * The floor under the latency of an authorization at a moderate offered rate: what the same load
 * generator, pacing and machine give a server that does next to nothing, one that also makes one
 * round trip to Postgres, and one that also commits one row to Postgres per request, beside Kassa
 * itself. An approval must be durable before it is answered, so no server can answer one faster
 * than the third; its tail is this machine's (two cores shared with Postgres and the generator, and
 * the disk's flush), not Kassa's. Figures only: nothing here passes or fails.
 *
 * Each server runs in a child process; the generator sends LATENCY_FLOOR_RATE requests a second
 * (default 1000) on a fixed schedule for LATENCY_FLOOR_DURATION_MS (default BENCH_DURATION_MS, else 8000) after a 1.5 s
 * warm-up, with the pacing and keep-alive client of `npm run bench`, and counts each latency from
 * when its request was due. Servers:
 * - `bare`: `Bun.serve` parsing the body and answering a fixed payment-shaped JSON;
 * - `select`: the same, after a prepared `select 1` on one postgres.js connection;
 * - `commit`: the same, after a prepared one-row insert that commits by itself (synchronous commit,
 *   as Kassa's ledger writer) on one postgres.js connection;
 * - `group`: the same, but requests are committed in groups: whenever no insert is in flight, every
 *   request waiting goes out as one multi-row insert on the one connection (the least a group commit
 *   does, and the floor under Kassa's latency at rates one commit per request cannot carry);
 * - `kassa`: the real server (`server/main.ts`), 8 organizations of 32 funded accounts, as in
 *   `npm run bench`.
 * Postgres is reached as `npm run bench` reaches it (its Unix socket when there is one).
 *
 * Added cost, to ask what a server with Kassa's CPU per request but nothing else of Kassa's (one
 * multi-row insert per group, no writer pipeline, no admission or shedding) would answer: with
 * LATENCY_FLOOR_BURN_SERVER_US the bare servers spin that long on their thread per request before
 * answering, and with LATENCY_FLOOR_BURN_POSTGRES_ROWS every row `commit` and `group` insert makes
 * Postgres count that many rows of a series first (about 46 µs of its CPU per 1000 on the twelfth
 * machine). Both default to 0; `npm run bench` never sets them.
 *
 *   ./node_modules/.bin/bun bench/latency-floor.ts        (LATENCY_FLOOR_SERVERS=bare,select,commit,group,kassa)
 *
 * With LATENCY_FLOOR_PAUSE_SERVER=cycles,stopMs,runMs,afterMs (for instance 40,30,5,2000), the
 * server process is stopped (SIGSTOP) for stopMs and let run (SIGCONT) for runMs, cycles times,
 * starting afterMs into the measured run: what a host that takes the machine's cores away again and
 * again does to a server, every thread of it stopped at once (docs/architecture.md, "Load shedding").
 *
 * `npm run bench` runs `bare`, `commit` and `group` at 1000/s, `group` at 10,000/s, and `bare` and
 * `group` in a closed loop (`measureClosedLoopFloor`) in its floor part, and prints Kassa's figures
 * beside them with the ratios.
 */
import postgres from 'postgres'
import { socketOf } from '../db/client.ts'
import { KeepAliveClient, type HttpAnswer } from './http-client.ts'
import { benchTransport, cpuPerOperation, cpuSnapshot, createBenchDatabase, createFundedOrg, paced, percentile, round2, startListening, startServer, writeResults, type BenchOrg, type ServerProcess } from './support.ts'

const RATE = Number(process.env.LATENCY_FLOOR_RATE ?? 1000)
const BURN_SERVER_US = Number(process.env.LATENCY_FLOOR_BURN_SERVER_US ?? 0)
const BURN_POSTGRES_ROWS = Math.trunc(Number(process.env.LATENCY_FLOOR_BURN_POSTGRES_ROWS ?? 0))
const DURATION_MS = Number(process.env.LATENCY_FLOOR_DURATION_MS ?? process.env.BENCH_DURATION_MS ?? 8000)
const WARMUP_MS = 1500
const PAUSE = pauseOf(process.env.LATENCY_FLOOR_PAUSE_SERVER)

/** LATENCY_FLOOR_PAUSE_SERVER, checked: cycles, stop, run and start (ms), or undefined when unset. */
function pauseOf(text: string | undefined): { cycles: number; stopMs: number; runMs: number; afterMs: number } | undefined {
  if (text === undefined || text === '') return undefined
  const values = text.split(',').map(Number)
  if (values.length !== 4 || values.some((value) => !Number.isInteger(value) || value < 0)) {
    throw new Error('LATENCY_FLOOR_PAUSE_SERVER must be cycles,stopMs,runMs,afterMs in whole numbers, for instance 40,30,5,2000')
  }
  const [cycles, stopMs, runMs, afterMs] = values as [number, number, number, number]
  return { cycles, stopMs, runMs, afterMs }
}

/** Stops and continues the server's process as LATENCY_FLOOR_PAUSE_SERVER says; it is always left running. */
async function pauseServer(pid: number, pause: NonNullable<typeof PAUSE>): Promise<void> {
  await Bun.sleep(pause.afterMs)
  for (let cycle = 0; cycle < pause.cycles; cycle++) {
    process.kill(pid, 'SIGSTOP')
    try {
      await Bun.sleep(pause.stopMs)
    } finally {
      process.kill(pid, 'SIGCONT')
    }
    await Bun.sleep(pause.runMs)
  }
}

const ANSWER = JSON.stringify({ id: 'pay_01a2113608cd723a85567d72af086ef1', object: 'payment', state: 'authorized', amount: '1.00', asset: 'USDC' })
const REQUEST_BODY = JSON.stringify({ accountId: 'acct_01a211360851759a822561f30ded474f', asset: 'USDC', amount: '1.00' })

export interface LatencyFloor {
  server: string
  /** Offered requests per second. */
  rate: number
  answered: number
  notApproved: number
  p50Ms: number
  p90Ms: number
  p99Ms: number
  p999Ms: number
  maxMs: number
  generatorLateMaxMs: number
  /** CPU per answer (µs) of the server process and of Postgres over the measured run, and how busy the machine was (%). */
  serverUs: number
  postgresUs: number
  machineBusyPercent: number
}

/** One postgres.js connection, over the Unix socket a `?host=/socket/folder` URL names (as Kassa connects). */
function connect(databaseUrl: string): postgres.Sql {
  const { url, host } = socketOf(databaseUrl)
  return postgres(url, { max: 1, onnotice: () => {}, ...(host === undefined ? {} : { host }) })
}

/**
 * The least a group commit can do: requests wait in a queue; whenever no batch is in flight,
 * everything queued goes out as one multi-row insert that commits by itself, and each waiter is
 * answered once it is durable.
 */
function groupCommit(insert: (count: number) => Promise<unknown>): () => Promise<void> {
  let waiting: Array<{ resolve: () => void; reject: (error: unknown) => void }> = []
  let inFlight = false
  const flush = async () => {
    inFlight = true
    while (waiting.length > 0) {
      const batch = waiting
      waiting = []
      try {
        await insert(batch.length)
        for (const waiter of batch) waiter.resolve()
      } catch (error) {
        for (const waiter of batch) waiter.reject(error)
      }
    }
    inFlight = false
  }
  return () =>
    new Promise<void>((resolve, reject) => {
      waiting.push({ resolve, reject })
      if (!inFlight) void flush()
    })
}

/** The child: a bare server, answering after `work`, until it is killed. Prints its address once it listens. */
async function serve(kind: string, databaseUrl: string | undefined): Promise<void> {
  let work: () => Promise<unknown> = () => Promise.resolve()
  if (kind !== 'bare') {
    const sql = connect(databaseUrl!)
    if (kind === 'select') work = () => sql`select 1 as one`
    else if (kind === 'commit' || kind === 'group') {
      await sql`create table if not exists latency_floor (id text primary key, amount numeric(38, 0) not null, data jsonb not null)`
      let next = 0
      // The burn is a subquery correlated with the row (an uncorrelated one would run once per statement).
      const amount = BURN_POSTGRES_ROWS > 0 ? sql`(select count(*) from generate_series(1, ${BURN_POSTGRES_ROWS}::int + length(id) * 0))` : sql`100`
      if (kind === 'commit') work = () => sql`insert into latency_floor (id, amount, data) select id, ${amount}, ${REQUEST_BODY}::jsonb from (select ${`row_${process.pid}_${next++}`}::text as id) as new_row`
      else work = groupCommit((count) => {
        const ids = Array.from({ length: count }, () => `row_${process.pid}_${next++}`)
        return sql`insert into latency_floor (id, amount, data) select id, ${amount}, ${REQUEST_BODY}::jsonb from unnest(${ids}::text[]) as id`
      })
    } else throw new Error(`unknown latency floor server ${kind} (bare, select, commit, group)`)
    await work()
  }
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    async fetch(request) {
      await request.json()
      if (BURN_SERVER_US > 0) {
        const until = performance.now() + BURN_SERVER_US / 1000
        while (performance.now() < until) {}
      }
      await work()
      return new Response(ANSWER, { status: 201, headers: { 'content-type': 'application/json' } })
    },
  })
  console.log(`listening on http://127.0.0.1:${server.port}`)
}

/** Starts a bare server in a child process (this file, `serve <kind>`). */
function startBare(kind: string, databaseUrl: string): Promise<ServerProcess> {
  return startListening([process.execPath, import.meta.path, 'serve', kind], { LATENCY_FLOOR_DATABASE_URL: databaseUrl })
}

/** Drives `base` at `rate` for the warm-up and the measured run; answers the measured run's figures. */
async function drive(server: string, running: ServerProcess, rate: number, requests: (client: KeepAliveClient) => Buffer[]): Promise<LatencyFloor> {
  const base = running.base
  const client = new KeepAliveClient(base)
  await client.warm(Math.ceil(rate / 2))
  const prepared = requests(client)
  const latencies: number[] = []
  let notApproved = 0
  let recording = false
  let outstanding = 0
  let sent = 0
  const send = (startedAt: number) => {
    outstanding += 1
    const measured = recording
    void client.send(prepared[sent++ % prepared.length]!).then(
      (answer: HttpAnswer) => {
        outstanding -= 1
        if (!measured) return
        latencies.push(performance.now() - startedAt)
        if (answer.status !== 201 || !answer.body.includes('"state":"authorized"')) notApproved += 1
      },
      () => {
        outstanding -= 1
        if (measured) notApproved += 1
      },
    )
  }
  await paced(rate, WARMUP_MS, send)
  recording = true
  const before = cpuSnapshot(running.process.pid)
  const paused = PAUSE === undefined ? Promise.resolve() : pauseServer(running.process.pid, PAUSE)
  const { lateMaxMs } = await paced(rate, DURATION_MS, send)
  await paused
  recording = false
  while (outstanding > 0) await Bun.sleep(5)
  const cpu = cpuPerOperation(before, cpuSnapshot(running.process.pid), latencies.length)
  client.close()
  latencies.sort((a, b) => a - b)
  return {
    server,
    rate,
    answered: latencies.length,
    notApproved,
    p50Ms: round2(percentile(latencies, 0.5)),
    p90Ms: round2(percentile(latencies, 0.9)),
    p99Ms: round2(percentile(latencies, 0.99)),
    p999Ms: round2(percentile(latencies, 0.999)),
    maxMs: round2(latencies.at(-1) ?? 0),
    generatorLateMaxMs: round2(lateMaxMs),
    serverUs: cpu.serverUs,
    postgresUs: cpu.postgresUs,
    machineBusyPercent: cpu.machineBusyPercent,
  }
}

async function measure(kind: string, rate: number): Promise<LatencyFloor> {
  const database = await createBenchDatabase(`latency_floor_${kind}`)
  try {
    if (kind === 'kassa') {
      const server = await startServer({ ...database.serverEnv, RATE_LIMIT_STORE: 'postgres' })
      try {
        const orgs: BenchOrg[] = []
        for (let index = 0; index < 8; index++) orgs.push(await createFundedOrg(server.base, `floor-${index}`, 32, '10000000'))
        const targets = orgs.flatMap((org) => org.accounts.map((account) => ({ key: org.key, account })))
        return await drive(kind, server, rate, (client) =>
          targets.map((target) => client.prepare('POST', '/v1/payments/authorize', { authorization: `Bearer ${target.key}`, 'content-type': 'application/json' }, JSON.stringify({ accountId: target.account, asset: 'USDC', amount: '1.00' }))),
        )
      } finally {
        await server.stop()
      }
    }
    const server = await startBare(kind, database.serverEnv.DATABASE_URL!)
    try {
      return await drive(kind, server, rate, (client) => [client.prepare('POST', '/v1/payments/authorize', { 'content-type': 'application/json' }, REQUEST_BODY)])
    } finally {
      await server.stop()
    }
  } finally {
    await database.drop()
  }
}

/** A server's closed loop: `connections` keep-alive connections, each sending its next request once the last is answered. */
export interface ClosedLoopFloor {
  server: string
  connections: number
  answered: number
  throughputPerSecond: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  serverUs: number
  postgresUs: number
  machineBusyPercent: number
}

/** Drives `running` in a closed loop for the warm-up and the measured run. */
async function driveClosed(server: string, running: ServerProcess, connections: number, requests: (client: KeepAliveClient) => Buffer[]): Promise<ClosedLoopFloor> {
  const client = new KeepAliveClient(running.base)
  await client.warm(connections)
  const prepared = requests(client)
  const latencies: number[] = []
  let recording = false
  let stop = false
  let sent = 0
  const loop = async () => {
    while (!stop) {
      const startedAt = performance.now()
      const measured = recording
      try {
        await client.send(prepared[sent++ % prepared.length]!)
      } catch {
        continue
      }
      if (measured && recording) latencies.push(performance.now() - startedAt)
    }
  }
  const loops = Array.from({ length: connections }, loop)
  await Bun.sleep(WARMUP_MS)
  const before = cpuSnapshot(running.process.pid)
  recording = true
  const startedAt = performance.now()
  await Bun.sleep(DURATION_MS)
  recording = false
  const elapsedMs = performance.now() - startedAt
  const cpu = cpuPerOperation(before, cpuSnapshot(running.process.pid), latencies.length)
  stop = true
  await Promise.all(loops)
  client.close()
  latencies.sort((a, b) => a - b)
  return {
    server,
    connections,
    answered: latencies.length,
    throughputPerSecond: Math.round((latencies.length * 1000) / elapsedMs),
    p50Ms: round2(percentile(latencies, 0.5)),
    p99Ms: round2(percentile(latencies, 0.99)),
    maxMs: round2(latencies.at(-1) ?? 0),
    serverUs: cpu.serverUs,
    postgresUs: cpu.postgresUs,
    machineBusyPercent: cpu.machineBusyPercent,
  }
}

/** The closed-loop throughput of a floor server (`bare`, `commit`, `group`): what `npm run bench` sets Kassa's closed loop beside. */
export async function measureClosedLoopFloor(kind: string, connections: number): Promise<ClosedLoopFloor> {
  const database = await createBenchDatabase(`latency_floor_closed_${kind}`)
  try {
    const server = await startBare(kind, database.serverEnv.DATABASE_URL!)
    try {
      const floor = await driveClosed(kind, server, connections, (client) => [client.prepare('POST', '/v1/payments/authorize', { 'content-type': 'application/json' }, REQUEST_BODY)])
      console.log(`latency floor | ${kind.padEnd(6)} | closed loop, ${connections} connections | ${floor.throughputPerSecond}/s | p50 ${floor.p50Ms} ms | p99 ${floor.p99Ms} ms | max ${floor.maxMs} ms | CPU per answer: server ${floor.serverUs} µs, Postgres ${floor.postgresUs} µs, machine ${floor.machineBusyPercent}% busy`)
      return floor
    } finally {
      await server.stop()
    }
  } finally {
    await database.drop()
  }
}

/** Measures each server in turn (`bare`, `select`, `commit`, `group`, `kassa`) at `rate`, printing a line for each. */
export async function measureLatencyFloors(kinds: string[], rate = RATE): Promise<LatencyFloor[]> {
  const floors: LatencyFloor[] = []
  for (const kind of kinds) {
    const floor = await measure(kind, rate)
    floors.push(floor)
    console.log(
      `latency floor | ${kind.padEnd(6)} | ${rate}/s offered | ${floor.answered} answered${floor.notApproved > 0 ? ` (${floor.notApproved} not approved)` : ''} | p50 ${floor.p50Ms} ms | p90 ${floor.p90Ms} ms | p99 ${floor.p99Ms} ms | p99.9 ${floor.p999Ms} ms | max ${floor.maxMs} ms | generator late by up to ${floor.generatorLateMaxMs} ms | CPU per answer: server ${floor.serverUs} µs, Postgres ${floor.postgresUs} µs, machine ${floor.machineBusyPercent}% busy`,
    )
  }
  return floors
}

/** The markdown table of `measureLatencyFloors`' figures. */
export function latencyFloorTable(floors: LatencyFloor[]): string[] {
  return [
    '| server | offered /s | answered | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | server µs | Postgres µs | machine busy |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...floors.map((floor) => `| ${floor.server} | ${floor.rate} | ${floor.answered} | ${floor.p50Ms} | ${floor.p90Ms} | ${floor.p99Ms} | ${floor.p999Ms} | ${floor.maxMs} | ${floor.serverUs} | ${floor.postgresUs} | ${floor.machineBusyPercent}% |`),
  ]
}

export const LATENCY_FLOOR_RATE = RATE

if (process.argv[2] === 'serve') {
  await serve(process.argv[3] ?? 'bare', process.env.LATENCY_FLOOR_DATABASE_URL)
} else if (import.meta.main) {
  const burn = BURN_SERVER_US > 0 || BURN_POSTGRES_ROWS > 0 ? `, added cost: ${BURN_SERVER_US} µs on the server's thread and ${BURN_POSTGRES_ROWS} series rows in Postgres per request` : ''
  console.log(`Latency floor: ${RATE}/s offered for ${DURATION_MS} ms per server after a ${WARMUP_MS} ms warm-up, Postgres over ${benchTransport()}, ${navigator.hardwareConcurrency} cores${burn}`)
  const floors = await measureLatencyFloors((process.env.LATENCY_FLOOR_SERVERS ?? 'bare,select,commit,kassa').split(',').filter((name) => name !== ''))
  const markdown = [`# Latency floor, ${RATE}/s offered`, '', ...latencyFloorTable(floors), ''].join('\n')
  console.log(`results written to ${writeResults('latency-floor', { rate: RATE, durationMs: DURATION_MS, floors }, markdown)}`)
}
