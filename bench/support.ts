/**
 * What every benchmark shares: a throwaway Postgres database, the real server as a child process,
 * a small HTTP client, percentiles, and writing results as JSON and markdown to bench/results/.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { availableParallelism } from 'node:os'
import postgres from 'postgres'
import { withDatabaseName } from '../db/client.ts'
import type { Kassa } from '../server/app.ts'
import type { LedgerOperation } from '../server/ledger/writer.ts'

export const SERVER_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
export const OPERATOR_TOKEN = 'bench-operator-token-0123456789abcdef0123'

export interface BenchDatabase {
  url: string
  /**
   * The environment that points a server at this database: over TCP like `url`, or, with
   * BENCH_PG_SOCKET set to Postgres' socket folder (e.g. /var/run/postgresql), over its Unix socket
   * (the same server; a database on the same host is usually reached that way).
   */
  serverEnv: Record<string, string>
  drop(): Promise<void>
}

/** The port of the Postgres server at SERVER_URL (its socket file in a socket folder is named by it too). */
const SERVER_PORT = new URL(SERVER_URL).port || '5432'

/**
 * Where the benchmarked server reaches Postgres: its Unix socket when the server runs on this host
 * (the default when the socket of SERVER_URL's port exists; BENCH_PG_SOCKET names another folder),
 * or TCP to SERVER_URL's host and port with BENCH_PG_SOCKET set empty.
 */
export function benchSocketFolder(): string | undefined {
  const configured = process.env.BENCH_PG_SOCKET
  if (configured !== undefined) return configured === '' ? undefined : configured
  return existsSync(`/var/run/postgresql/.s.PGSQL.${SERVER_PORT}`) ? '/var/run/postgresql' : undefined
}

export function benchTransport(): string {
  const folder = benchSocketFolder()
  return folder === undefined ? `TCP to ${new URL(SERVER_URL).host}` : `its Unix socket in ${folder} (port ${SERVER_PORT})`
}

/** A fresh database on the Postgres server, dropped afterwards. */
export async function createBenchDatabase(label: string): Promise<BenchDatabase> {
  const name = `kassa_bench_${label}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`
  const admin = postgres(SERVER_URL, { max: 1, onnotice: () => {} })
  await admin.unsafe(`create database "${name}"${process.env.BENCH_DB_COLLATE ? ` template template0 lc_collate '${process.env.BENCH_DB_COLLATE}' lc_ctype '${process.env.BENCH_DB_COLLATE}'` : ""}`)
  await admin.end()
  const url = withDatabaseName(SERVER_URL, name)
  const socketFolder = benchSocketFolder()
  return {
    url,
    serverEnv: { DATABASE_URL: socketFolder ? `postgres://${new URL(SERVER_URL).username}@localhost:${SERVER_PORT}/${name}?host=${socketFolder}` : url },
    async drop() {
      const cleanup = postgres(SERVER_URL, { max: 1, onnotice: () => {} })
      await cleanup.unsafe(`drop database if exists "${name}" with (force)`)
      await cleanup.end()
    },
  }
}

/** What the Postgres server as a whole did so far: checkpoints begun, their data-file sync time, WAL written. */
export interface PostgresActivity {
  checkpoints: number
  checkpointSyncMs: number
  walBytes: number
}

let activityClient: ReturnType<typeof postgres> | undefined

/**
 * Reads `PostgresActivity` from the server's statistics (one admin connection, kept until
 * `closePostgresActivity`). Postgres begins a checkpoint every `checkpoint_timeout` or every
 * `max_wal_size` of WAL; its writes and the final sync of the data files share the disk with the
 * commits' WAL flushes, so a run that holds one can show commits stalled behind it.
 */
export async function postgresActivity(): Promise<PostgresActivity> {
  activityClient ??= postgres(SERVER_URL, { max: 1, onnotice: () => {} })
  const [row] = await activityClient.unsafe<Array<{ checkpoints: string; sync_ms: string; wal_bytes: string }>>(
    `select (checkpoints_timed + checkpoints_req)::text as checkpoints, checkpoint_sync_time::text as sync_ms,
       pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as wal_bytes from pg_stat_bgwriter`,
  )
  return { checkpoints: Number(row!.checkpoints), checkpointSyncMs: Number(row!.sync_ms), walBytes: Number(row!.wal_bytes) }
}

export async function closePostgresActivity(): Promise<void> {
  await activityClient?.end()
  activityClient = undefined
}

export interface ServerProcess {
  base: string
  process: Bun.Subprocess
  stop(): Promise<void>
}

/**
 * Starts `bun server/main.ts` and answers once it listens. For diagnostics, BENCH_SERVER_BUN_ARGS
 * adds arguments to the server's `bun` (`--cpu-prof --cpu-prof-dir=/tmp/prof`), and
 * BENCH_SERVER_ENV, a JSON object, adds to the server's environment alone (`{"BUN_JSC_logGC":"1"}`
 * logs its garbage collections to the benchmark's stderr; the load generator's are not logged), and
 * BENCH_SERVER_NICE runs the server at that niceness (`nice -n`; 5 gives Postgres and the load
 * generator, at 0, about three times its weight in the scheduler when they compete for a core).
 */
export function startServer(env: Record<string, string>): Promise<ServerProcess> {
  const nice = process.env.BENCH_SERVER_NICE ? ['nice', '-n', process.env.BENCH_SERVER_NICE] : []
  return startListening([...nice, './node_modules/.bin/bun', ...(process.env.BENCH_SERVER_BUN_ARGS ? process.env.BENCH_SERVER_BUN_ARGS.split(' ') : []), 'server/main.ts'], {
    ...serverEnvironment(),
    PORT: '0',
    HOST: '127.0.0.1',
    OPERATOR_TOKEN,
    DATABASE_POOL_MAX: '20',
    ...env,
  })
}

/** Runs `command` as a child process (with `env` added to this one's) and answers once it prints `listening on http://…`. */
export async function startListening(command: string[], env: Record<string, string>): Promise<ServerProcess> {
  const child = Bun.spawn(command, { env: { ...process.env, ...env }, stdout: 'pipe', stderr: 'inherit' })
  const reader = child.stdout.getReader()
  let output = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) throw new Error(`server exited: ${output}`)
    output += new TextDecoder().decode(value)
    const match = /listening on (http:\/\/[\d.]+:\d+)/.exec(output)
    if (match) {
      reader.releaseLock()
      void child.stdout.pipeTo(new WritableStream())
      // What warmed the server before it listened (`WARM_UP_AUTHORIZATIONS`): a fresh server's first
      // seconds depend on it, so each run says which it had.
      const warmUp = /kassa: warm-up: (.*)/.exec(output)
      if (warmUp) console.error(`server warm-up: ${warmUp[1]}`)
      return {
        base: match[1]!,
        process: child,
        async stop() {
          child.kill()
          await child.exited
        },
      }
    }
  }
}

/** BENCH_SERVER_ENV, checked: a JSON object of strings. */
function serverEnvironment(): Record<string, string> {
  const text = process.env.BENCH_SERVER_ENV
  if (text === undefined || text === '') return {}
  const parsed: unknown = JSON.parse(text)
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || Object.values(parsed).some((value) => typeof value !== 'string')) {
    throw new Error('BENCH_SERVER_ENV must be a JSON object of strings, for instance {"BUN_JSC_logGC":"1"}')
  }
  return parsed as Record<string, string>
}

export interface Answer {
  status: number
  body: any
}

export async function call(base: string, method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { status: response.status, body: await response.json() }
}

export interface BenchOrg {
  id: string
  key: string
  accounts: string[]
}

/**
 * A setup write sent again, with one Idempotency-Key, while the answer is 503 (in cluster mode: the
 * organization's owner is changing, "nothing was done; retry"), for at most 30 s.
 */
async function setupCall(base: string, method: string, path: string, token: string, body?: unknown): Promise<Answer> {
  const headers = { 'idempotency-key': `bench-setup-${crypto.randomUUID()}` }
  const deadline = performance.now() + 30_000
  for (;;) {
    const answer = await call(base, method, path, token, body, headers)
    if (answer.status !== 503 || performance.now() > deadline) return answer
    await Bun.sleep(50)
  }
}

/** An organization with a test key, a raised rate limit, and funded accounts. */
export async function createFundedOrg(base: string, name: string, accountCount: number, amount: string): Promise<BenchOrg> {
  const org = (await call(base, 'POST', '/ops/v1/orgs', OPERATOR_TOKEN, { name })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  await setupCall(base, 'PATCH', `/ops/v1/orgs/${org.id}/limits`, OPERATOR_TOKEN, { rateLimitPerMinute: 10_000_000 })
  const accounts: string[] = []
  for (let index = 0; index < accountCount; index++) {
    const id = (await setupCall(base, 'POST', '/v1/accounts', key, { externalId: `${name}-${index}` })).body.id as string
    const funded = await setupCall(base, 'POST', `/v1/sandbox/accounts/${id}/fund`, key, { asset: 'USDC', amount })
    if (funded.status !== 201 && funded.status !== 200) throw new Error(`funding failed: ${JSON.stringify(funded.body)}`)
    accounts.push(id)
  }
  return { id: org.id, key, accounts }
}

/** How far ahead of its due time a request may go out: the pacing loop wakes about once a millisecond. */
const LOOKAHEAD_MS = 1

/**
 * Calls `send` `rate` times a second for `durationMs` on a fixed schedule, whatever the answers do,
 * and answers how long it ran. Each wake-up sends every request due before the next one; `send` is
 * given the time the request's latency counts from: its due time when it goes out late (so a stall
 * shows in every request it delayed), or the time it actually went out when that is earlier.
 */
export async function paced(rate: number, durationMs: number, send: (startedAt: number, sentAt: number) => void): Promise<{ ranMs: number; lateMaxMs: number }> {
  const startedAt = performance.now()
  const total = Math.floor((durationMs * rate) / 1000)
  let scheduled = 0
  let lateMaxMs = 0
  for (;;) {
    const now = performance.now()
    if (now - startedAt >= durationMs) return { ranMs: now - startedAt, lateMaxMs }
    while (scheduled < total && startedAt + (scheduled * 1000) / rate < now + LOOKAHEAD_MS) {
      const due = startedAt + (scheduled * 1000) / rate
      const sentAt = performance.now()
      lateMaxMs = Math.max(lateMaxMs, sentAt - due)
      send(Math.min(due, sentAt), sentAt)
      scheduled += 1
    }
    await Bun.sleep(1)
  }
}

export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))]!
}

export const round2 = (value: number) => Number(value.toFixed(2))

/** Writes `<name>-<stamp>.json` and `.md` into bench/results/ and answers the markdown path. */
export function writeResults(name: string, json: unknown, markdown: string): string {
  const folder = join(import.meta.dir, 'results')
  mkdirSync(folder, { recursive: true })
  const stamp = new Date().toISOString().replaceAll(':', '-')
  writeFileSync(join(folder, `${name}-${stamp}.json`), JSON.stringify(json, null, 2))
  const path = join(folder, `${name}-${stamp}.md`)
  writeFileSync(path, markdown)
  return path
}

/** CPU time (ms) so far of the load generator (this process), the server process and every Postgres process. */
export interface CpuSnapshot {
  generatorMs: number
  serverMs: number
  /**
   * Of `serverMs`, its main thread: the event loop, where requests, decisions and the writer run.
   * The rest is the JavaScript engine's helpers (the JIT compiler, the garbage collector's threads)
   * and the allocator's.
   */
  serverMainMs: number
  /**
   * The server's minor page faults so far: each the first touch of a page the process had not
   * used or had given back, a cost in system time that grows with the memory a request touches.
   */
  serverMinorFaults: number
  /**
   * Every Postgres process's CPU so far, by process id. A run's figure is the sum of each process's
   * growth over it: a backend that started during the run counts from its start, and one that
   * ended during it (a connection of the previous server closing) is left out, where a sum over
   * whatever processes each snapshot saw went below zero when such a backend left.
   */
  postgresMsByPid: Map<string, number>
  /** The whole machine: busy and all (every core), from /proc/stat. */
  machineBusyMs: number
  machineAllMs: number
  /** Of all: time the hypervisor ran something else while a core of this machine wanted to run (steal). */
  machineStolenMs: number
  /**
   * Time each waited for a core while it was ready to run (the kernel's run-queue wait, from
   * /proc/<pid>/schedstat): the generator's and the server's main threads, and every Postgres
   * process together. On two shared cores this is where a busy machine's latency hides: time an
   * answer was ready to be worked on and nothing ran it.
   */
  generatorMainWaitMs: number
  serverMainWaitMs: number
  /** By process id, summed over the run like `postgresMsByPid` (a backend that left mid-run must not lower it). */
  postgresWaitMsByPid: Map<string, number>
}

const TICK_MS = 10

/** CPU time (user + system, ms) a process has used so far, from /proc; 0 once it is gone. */
export function processCpuMs(pid: number | string): number {
  return statCpuMs(`/proc/${pid}/stat`)
}

/** Time (ms) a thread has waited on a run queue while ready to run, from /proc/<pid>/task/<tid>/schedstat; 0 where it is missing. */
function runQueueWaitMs(path: string): number {
  try {
    return Number(readFileSync(path, 'utf8').split(' ')[1]) / 1e6
  } catch {
    return 0 // gone meanwhile, or no scheduler statistics
  }
}

/** CPU time of this process' main (JavaScript) thread so far, from /proc, in milliseconds (0 where /proc is missing). */
export function mainThreadCpuMs(): number {
  return statCpuMs(`/proc/${process.pid}/task/${process.pid}/stat`)
}

/** A process' user and system CPU time (ms) and minor page faults so far, from /proc; zeros once it is gone. */
export function processStat(pid: number | string): { userMs: number; systemMs: number; minorFaults: number } {
  return statOf(`/proc/${pid}/stat`)
}

function statCpuMs(path: string): number {
  const { userMs, systemMs } = statOf(path)
  return userMs + systemMs
}

/** The CPU times and minor faults of a /proc `stat` file (fields after the name, which may hold spaces); zeros once it is gone. */
function statOf(path: string): { userMs: number; systemMs: number; minorFaults: number } {
  try {
    const stat = readFileSync(path, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return { userMs: Number(fields[11]) * TICK_MS, systemMs: Number(fields[12]) * TICK_MS, minorFaults: Number(fields[7]) }
  } catch {
    return { userMs: 0, systemMs: 0, minorFaults: 0 } // gone meanwhile
  }
}

/**
 * Where the machine's CPU goes during a run, read from /proc (Linux): what the benchmark's own
 * process, the server and Postgres (every backend and helper process) used. Zeros elsewhere.
 */
export function cpuSnapshot(serverPid: number): CpuSnapshot {
  if (!existsSync('/proc/stat')) return { generatorMs: 0, serverMs: 0, serverMainMs: 0, serverMinorFaults: 0, postgresMsByPid: new Map(), machineBusyMs: 0, machineAllMs: 0, machineStolenMs: 0, generatorMainWaitMs: 0, serverMainWaitMs: 0, postgresWaitMsByPid: new Map() }
  const postgresMsByPid = new Map<string, number>()
  const postgresWaitMsByPid = new Map<string, number>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    let comm = ''
    try {
      comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim()
    } catch {
      continue
    }
    if (comm === 'postgres' || comm === 'postmaster') {
      postgresMsByPid.set(entry, processCpuMs(entry))
      postgresWaitMsByPid.set(entry, runQueueWaitMs(`/proc/${entry}/schedstat`))
    }
  }
  // user nice system idle iowait irq softirq steal (guest and guest_nice are already inside user and nice).
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.split(/\s+/).slice(1, 9).map(Number)
  const idle = (cpu[3] ?? 0) + (cpu[4] ?? 0)
  const all = sumOf(cpu)
  const usage = process.cpuUsage()
  const server = processStat(serverPid)
  return {
    generatorMs: (usage.user + usage.system) / 1000,
    serverMs: server.userMs + server.systemMs,
    serverMainMs: statCpuMs(`/proc/${serverPid}/task/${serverPid}/stat`),
    serverMinorFaults: server.minorFaults,
    postgresMsByPid, machineBusyMs: (all - idle) * TICK_MS, machineAllMs: all * TICK_MS, machineStolenMs: (cpu[7] ?? 0) * TICK_MS,
    generatorMainWaitMs: runQueueWaitMs(`/proc/${process.pid}/task/${process.pid}/schedstat`),
    serverMainWaitMs: runQueueWaitMs(`/proc/${serverPid}/task/${serverPid}/schedstat`),
    postgresWaitMsByPid,
  }
}

/**
 * CPU per operation (µs) over a run, between two snapshots, and how busy the machine was. With it,
 * the rate this machine could reach at that cost with every core busy (the generator's share
 * included, since it runs on the same cores): a ceiling for this code here, not a measured rate.
 */
export function cpuPerOperation(
  before: CpuSnapshot,
  after: CpuSnapshot,
  operations: number,
): CpuPerOperation {
  const per = (ms: number) => (operations === 0 ? 0 : round2((ms * 1000) / operations))
  const all = after.machineAllMs - before.machineAllMs
  // Wall time of the run, per core: the machine's clock ticks over all cores, divided by their number.
  const wallMs = all / availableParallelism()
  const waitShare = (ms: number) => (wallMs <= 0 ? 0 : Math.round((ms / wallMs) * 1000) / 10)
  const generatorUs = per(after.generatorMs - before.generatorMs)
  const serverUs = per(after.serverMs - before.serverMs)
  const postgresGrowths = growths(before.postgresMsByPid, after.postgresMsByPid)
  const postgresMs = sumOf(postgresGrowths)
  const postgresUs = per(postgresMs)
  const busiestMs = Math.max(0, ...postgresGrowths)
  const perAnswerUs = generatorUs + serverUs + postgresUs
  return {
    generatorUs,
    serverUs,
    serverMainUs: per(after.serverMainMs - before.serverMainMs),
    serverFaultsPerAnswer: operations === 0 ? 0 : round2((after.serverMinorFaults - before.serverMinorFaults) / operations),
    postgresUs,
    postgresBusiestUs: per(busiestMs),
    postgresBusiestPercent: postgresMs === 0 ? 0 : Math.round((busiestMs / postgresMs) * 100),
    machineBusyPercent: all === 0 ? 0 : Math.round(((after.machineBusyMs - before.machineBusyMs) / all) * 100),
    machineStolenMs: after.machineStolenMs - before.machineStolenMs,
    allCoresCeilingPerSecond: perAnswerUs === 0 ? 0 : Math.floor((availableParallelism() * 1_000_000) / perAnswerUs),
    generatorMainWaitPercent: waitShare(after.generatorMainWaitMs - before.generatorMainWaitMs),
    serverMainWaitPercent: waitShare(after.serverMainWaitMs - before.serverMainWaitMs),
    postgresWaitPercent: waitShare(growthByPid(before.postgresWaitMsByPid, after.postgresWaitMsByPid)),
  }
}

/**
 * Each process's growth between two readings: a process that started in between counts from its
 * start, one that ended is left out, and a reused id with less than before adds nothing.
 */
function growths(before: Map<string, number>, after: Map<string, number>): number[] {
  return [...after].map(([pid, value]) => value - Math.min(value, before.get(pid) ?? 0))
}

/** The sum of each process's growth (`growths`). */
function growthByPid(before: Map<string, number>, after: Map<string, number>): number {
  return sumOf(growths(before, after))
}

function sumOf(values: number[]): number {
  return values.reduce((sum, value) => sum + value, 0)
}

/** What `cpuPerOperation` answers. */
export interface CpuPerOperation {
  generatorUs: number
  serverUs: number
  serverMainUs: number
  /** The server's minor page faults per answer. */
  serverFaultsPerAnswer: number
  postgresUs: number
  /**
   * Of `postgresUs`, the one Postgres process that used the most, and its share of all of them
   * (%). Under an authorization load that is the ledger writer's backend: every batch goes over
   * the writer's one connection (pipelined or not), so one backend runs them one after another
   * and its time is serial, the part of Postgres' cost a second core does not help.
   */
  postgresBusiestUs: number
  postgresBusiestPercent: number
  machineBusyPercent: number
  machineStolenMs: number
  allCoresCeilingPerSecond: number
  /**
   * Share of the run's wall time (%) that each waited for a core while ready to run: the
   * generator's and the server's main threads, and all Postgres processes together (which can
   * pass 100 with several waiting at once).
   */
  generatorMainWaitPercent: number
  serverMainWaitPercent: number
  postgresWaitPercent: number
}

/** An organization made in process through `app.handle`, with its test key and funded accounts. */
export interface InProcessOrg {
  orgId: string
  key: string
  accounts: string[]
}

/**
 * Creates an organization with a raised rate limit and `accountCount` accounts funded with `amount`
 * USDC each, through the app's own routes in process (no socket), and waits until the funding is
 * written.
 */
export async function inProcessFundedOrg(kassa: Kassa, accountCount: number, amount: string): Promise<InProcessOrg> {
  const call = async (path: string, method: string, token: string, body: unknown): Promise<any> => {
    const response = await kassa.app.handle(
      new Request(`http://kassa.bench${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    )
    if (response.status >= 300) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`)
    return response.json()
  }
  const operator = kassa.runtime.operatorToken
  const org = await call('/ops/v1/orgs', 'POST', operator, { name: 'Bench' })
  const key = (org.keys as Array<{ type: string; key: string }>).find((entry) => entry.type === 'test')!.key
  await call(`/ops/v1/orgs/${org.id}/limits`, 'PATCH', operator, { rateLimitPerMinute: 10_000_000 })
  const accounts: string[] = []
  for (let index = 0; index < accountCount; index++) {
    const account = await call('/v1/accounts', 'POST', key, { externalId: `bench-${index}` })
    await call(`/v1/sandbox/accounts/${account.id}/fund`, 'POST', key, { asset: 'USDC', amount })
    accounts.push(account.id)
  }
  await kassa.runtime.ledger.drain()
  return { orgId: org.id, key, accounts }
}

/**
 * For attribution only, never a figure of the product (it skips durability): the ledger writer
 * answers every operation at once and writes nothing, so what is left is the request path alone.
 */
export function skipLedgerWrites(kassa: Kassa): void {
  kassa.runtime.ledger.writer.enqueue = (operation: LedgerOperation) => {
    const now = performance.now()
    operation.committed?.({ sentAt: now, committedAt: now, operations: 1, behind: 0 }, now)
    return Promise.resolve()
  }
}
