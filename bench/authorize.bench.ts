/**
 * Payment authorization benchmark. Figures only: nothing here passes or fails.
 *
 * 1. mitata, in process: the pieces of the hot path (key lookup, body validation, the decision and
 *    reservation against the in-memory balance, the webhook signature of the resulting event) and
 *    the whole request through `app.handle` on embedded PGlite.
 * 2. HTTP against the real server on Postgres, every approval durable before it is answered:
 *    - closed loop: many keep-alive connections as fast as they go (throughput, p50, p99, max);
 *    - open loop at fixed offered rates, latency measured from the scheduled send time so a slow
 *      answer cannot hide the requests queued behind it (no coordinated omission);
 *    both with group commit on and off (one transaction per request), and the ratio;
 *    and 1000/s offered while a TCP proxy between the server and Postgres cuts the database off.
 * 3. The floors (bench/latency-floor.ts: a bare server, one committing one row per request, the least
 *    group commit, at 1000/s and in a closed loop), and each target figure printed beside its floor
 *    with the ratio: p99 at 1000/s against the group floor's (at most 1.5x), closed-loop throughput
 *    against the group floor's (at least 0.7x), and no answer over 500 ms.
 * 4. The process tunings with and without (BENCH_SKIP_TUNING=1 skips them; BENCH_TUNINGS=0,1 picks
 *    variants by index): a server as `npm start` starts it, and one with each tuning undone (the one
 *    left: the warm-up before listening).
 * Writes JSON and markdown to bench/results/.
 *
 * Settings: BENCH_DURATION_MS (per run, default 8000), BENCH_CONNECTIONS (closed loop, default 128),
 * BENCH_RATES (open-loop offered rates, default "1000,5000,10000,15000"), BENCH_ORGS (default 8),
 * BENCH_ACCOUNTS (per org, default 32), BENCH_SKIP_OFF=1 to skip the one-transaction-per-request run,
 * BENCH_SKIP_CLOSED=1 to skip the closed-loop run, BENCH_SKIP_OUTAGE=1 to skip the database-cut-off run, BENCH_SKIP_WEBHOOKS=1 to skip the webhook-load
 * comparison (BENCH_WEBHOOK_RATE, default 1000/s). BENCH_SERVER_BUN_ARGS and BENCH_SERVER_ENV add
 * arguments and environment to the server alone, for profiles and garbage-collector logs (bench/support.ts).
 */
import { createHmac } from 'node:crypto'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { bench, do_not_optimize, run, summary } from 'mitata'
import { createApp } from '../server/app.ts'
import { configForTests } from '../test/support/config.ts'
import { HotBalances, deltasOf, type Posting } from '../server/ledger/hot-balances.ts'
import { parseAmount } from '../server/lib/money.ts'
import { countAbove, histogramBetween, quantileBound, type HistogramSnapshot } from '../server/lib/histogram.ts'
import { AuthorizePaymentBody } from '../server/modules/payments/model.ts'
import type { SlowAuthorization } from '../server/modules/payments/slow.ts'
import { EMBEDDED_IN_MEMORY, openDatabase } from '../db/client.ts'
import { TcpProxy } from '../test/support/tcp-proxy.ts'
import { createWebhookLoad } from './webhook-receivers.ts'
import { KeepAliveClient, type HttpAnswer } from './http-client.ts'
import { LATENCY_FLOOR_RATE, latencyFloorTable, measureClosedLoopFloor, measureLatencyFloors, type ClosedLoopFloor } from './latency-floor.ts'
import postgres from 'postgres'
import { OPERATOR_TOKEN, type CpuPerOperation, type CpuSnapshot, type PostgresActivity, closePostgresActivity, postgresActivity, benchSocketFolder, cpuPerOperation, cpuSnapshot, benchTransport, call, createBenchDatabase, createFundedOrg, paced, percentile, round2, startServer, writeResults, type BenchOrg, type ServerProcess } from './support.ts'

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 8000)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 128)
const RATES = (process.env.BENCH_RATES ?? '1000,5000,10000,15000').split(',').filter((rate) => rate.trim() !== '').map(Number)
const ORGS = Number(process.env.BENCH_ORGS ?? 8)
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 32)
const SKIP_OFF = process.env.BENCH_SKIP_OFF === '1'
const WARMUP_MS = 1500
/** The contract's hard budget: an answer slower than this is a broken promise, counted separately. */
const BUDGET_MS = 500
/**
 * An answer this many ms after its request was due counts as slow (the contract's p99 at 1000/s):
 * each open loop says where the slow answers' time went, from the generator's own times and the
 * server's slow-authorization log (`GET /ops/v1/payments/slow`, read a page at a time from where it
 * stood when the run began), which the benchmark's servers keep from `SLOW_LOG_SERVER_MS` in the
 * server on (so that answers slow outside the server are found there too).
 */
const SLOW_MS = 3
const SLOW_LOG_SERVER_MS = '1'
/**
 * How many of them the benchmark's servers keep (`SLOW_AUTHORIZATIONS_KEPT`): past capacity nearly
 * every answer takes a millisecond, and the answers over the budget must be found in the log
 * wherever in the run they fell (a run at 15,000/s offered logged 43,000 to 92,000).
 */
const SLOW_LOG_KEPT = '131072'
/** Offered rate of the with/without webhook load comparison. */
const WEBHOOK_RATE = Number(process.env.BENCH_WEBHOOK_RATE ?? 1000)
/** Offered rate of the group-commit floor (`bench/latency-floor.ts`'s \`group\` server): the throughput target. */
const GROUP_FLOOR_RATE = 10_000

interface InProcessFigure {
  name: string
  avgNs: number
  p99Ns: number
}

async function inProcess(): Promise<InProcessFigure[]> {
  const database = await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 })
  const kassa = await createApp(configForTests({ rateLimitStore: 'memory' }), { database })
  const runtime = kassa.runtime
  const opsHeaders = { authorization: `Bearer ${kassa.runtime.operatorToken}`, 'content-type': 'application/json' }
  const org = await kassa.app.handle(new Request('http://kassa.bench/ops/v1/orgs', { method: 'POST', headers: opsHeaders, body: JSON.stringify({ name: 'Mitata' }) })).then((response) => response.json() as Promise<any>)
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  await kassa.app.handle(new Request(`http://kassa.bench/ops/v1/orgs/${org.id}/limits`, { method: 'PATCH', headers: opsHeaders, body: JSON.stringify({ rateLimitPerMinute: 10_000_000 }) }))
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
  const account = await kassa.app.handle(new Request('http://kassa.bench/v1/accounts', { method: 'POST', headers, body: JSON.stringify({ externalId: 'mitata' }) })).then((response) => response.json() as Promise<any>)
  await kassa.app.handle(new Request(`http://kassa.bench/v1/sandbox/accounts/${account.id}/fund`, { method: 'POST', headers, body: JSON.stringify({ asset: 'USDC', amount: '1000000000' }) }))

  const validator = TypeCompiler.Compile(AuthorizePaymentBody)
  const body = { accountId: account.id as string, asset: 'USDC', amount: '1.25', merchant: { name: 'Coffee', mcc: '5814' } }
  const balances = new HotBalances()
  balances.apply(deltasOf(org.id, [
    { accountId: account.id, kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor: 10n ** 30n },
    { accountId: 'system:faucet', kind: 'system', bucket: 'available', asset: 'USDC', amountMinor: -(10n ** 30n) },
  ], 1n).values())
  const postings: Posting[] = [
    { accountId: account.id, kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor: -1_250_000n },
    { accountId: account.id, kind: 'customer', bucket: 'held', asset: 'USDC', amountMinor: 1_250_000n },
  ]
  const secret = 'whsec_benchmarkbenchmarkbenchmarkbench'
  const envelope = JSON.stringify({ id: 'evt_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f', type: 'payment.authorized', created: new Date().toISOString(), data: { paymentId: 'pay_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f', ...body } })
  const authorizeRequest = () => new Request('http://kassa.bench/v1/payments/authorize', { method: 'POST', headers, body: JSON.stringify(body) })

  summary(() => {
    bench('key lookup (hash + in-memory cache)', () => do_not_optimize(runtime.keys.lookup(key, Date.now())))
    bench('validation (compiled TypeBox + amount parse)', () => do_not_optimize(validator.Check(body) && parseAmount(body.amount, 6, 'amount')))
    bench('decision + reservation in memory', () => {
      if (balances.findOverdraft(org.id, postings) === undefined) balances.apply(deltasOf(org.id, postings, 1n).values())
    })
    bench('webhook signature of the event (HMAC-SHA256)', () => do_not_optimize(createHmac('sha256', secret).update(`${Math.floor(Date.now() / 1000)}.${envelope}`).digest('hex')))
  })
  bench('whole request via app.handle, committed to embedded PGlite', async () => {
    const response = await kassa.app.handle(authorizeRequest())
    await response.arrayBuffer()
  })
  const report = await run()
  await kassa.close()
  const figures: InProcessFigure[] = []
  for (const trial of report.benchmarks) {
    for (const result of trial.runs) {
      if (result.stats === undefined) continue
      figures.push({ name: result.name, avgNs: round2(result.stats.avg), p99Ns: round2(result.stats.p99) })
    }
  }
  return figures
}

interface LoadFigures {
  mode: string
  /** Webhook load runs: deliveries the receivers took while the run lasted. */
  deliveriesReceived?: number
  groupCommit: boolean
  offeredPerSecond: number | null
  connections: number | null
  durationMs: number
  answered: number
  approved: number
  declined: number
  /** The declines by `failureCode`. */
  declineCodes: Record<string, number>
  /** Authorizations refused 429 `rate_limited`: shed, or (far past capacity) refused because no further decline could be recorded. */
  refused: number
  /** Of the refusals, those the server shed (`GET /ops/v1/payments/stats`, `shedding.shed`). */
  shed: number
  /** Late ticks of the server's loop that did not count toward shedding: its thread was stopped, not busy (`shedding.stalls`). */
  stalls: number
  errors: number
  errorKinds: Record<string, number>
  throughputPerSecond: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  /** p99 and max of each kind of answer (latencies from when the request was due). */
  byAnswer: Record<'approved' | 'declined' | 'refused', { count: number; p99Ms: number; maxMs: number }>
  overBudget: number
  /** Of those, approvals. */
  approvedOverBudget: number
  transactionsPerSecond: number
  operationsPerTransaction: number
  /**
   * Open loop: the p99 counted from when each request was sent rather than when it was due, that is
   * without the load generator's own lateness (the p99 above includes it).
   */
  p99FromSendMs?: number
  /** Open loop: where the answers slower than `SLOW_MS` (from due) spent their time. */
  slowAnswers?: SlowBreakdown
  /** Open loop: the same for the answers over the budget (`BUDGET_MS`), the contract's broken promises. */
  overBudgetAnswers?: SlowBreakdown
  /** Open loop: the largest event-loop lag the server reported during the run. */
  serverLagMaxMs?: number
  /** Open loop: how late the load generator sent its most delayed request (counted in that request's latency). */
  generatorLateMaxMs?: number
  /**
   * The server's batch commits during the run (from sending a batch to Postgres confirming it): how
   * many, how many took longer than 3 ms and 20 ms, and the bucket bound their p99 fell under.
   */
  commits: { count: number; over3Ms: number; over20Ms: number; p99AtMostMs: number | null }
  /**
   * Ledger operations sent during the run, and how long each waited in the writer's queue before
   * its batch was sent (the batch ahead of it still committing): how many waited over 1 ms and over
   * 3 ms, and the bucket bound their p99 fell under. An approval is durable after this wait plus its
   * batch's commit.
   */
  queued: { count: number; over1Ms: number; over3Ms: number; p99AtMostMs: number | null }
  /**
   * Ledger operations committed during the run, from entering the writer's queue to their batch's
   * commit (the queue wait plus the commit, per operation): the bucket bounds their p50 and p99 fell
   * under and how many took longer than 3 ms. A large, slow batch counts once per operation it
   * carries, where `commits` counts it once.
   */
  durable: { count: number; over3Ms: number; p50AtMostMs: number | null; p99AtMostMs: number | null }
  /**
   * The server's own view of its authorizations during the run (`GET /ops/v1/payments/stats`): from
   * each one's arrival to its answer, the bucket bounds its p50 and p99 fell under and how many took
   * longer than 3 ms. The rest of a caller's latency is the kernel's queues and the caller itself.
   */
  served: { count: number; over3Ms: number; p50AtMostMs: number | null; p99AtMostMs: number | null }
  /** CPU per answered request (µs) of the load generator, the server and Postgres, and how busy the machine was. */
  cpu: CpuPerOperation
  /**
   * The Postgres server during the run: checkpoints begun (their writes and data-file sync share
   * the disk with the commits' flushes), the time their syncs took, and WAL written per answer
   * (everything the server wrote, from every database: the benchmark's is nearly all of it).
   */
  postgres: { checkpoints: number; checkpointSyncMs: number; walKbPerAnswer: number }
}

interface Target {
  org: BenchOrg
  account: string
  /** The target's request as bytes, built once per client (its host header names the server). */
  prepared?: { client: KeepAliveClient; bytes: Buffer }
}

function targetsOf(orgs: BenchOrg[]): Target[] {
  return orgs.flatMap((org) => org.accounts.map((account) => ({ org, account })))
}

/** `keep-alive` (the default: bench/http-client.ts) or `fetch`. */
const CLIENT = process.env.BENCH_CLIENT === 'fetch' ? 'fetch' : 'keep-alive'
const clients = new Map<string, KeepAliveClient>()

function authorize(base: string, target: Target): Promise<HttpAnswer> {
  const headers = () => ({ authorization: `Bearer ${target.org.key}`, 'content-type': 'application/json' })
  const body = () => JSON.stringify({ accountId: target.account, asset: 'USDC', amount: '1.00' })
  if (CLIENT === 'fetch') {
    return fetch(`${base}/v1/payments/authorize`, { method: 'POST', headers: headers(), body: body() }).then(async (response) => ({ status: response.status, body: await response.text() }))
  }
  const client = clientFor(base)
  if (target.prepared?.client !== client) target.prepared = { client, bytes: client.prepare('POST', '/v1/payments/authorize', headers(), body()) }
  return client.send(target.prepared.bytes)
}

function clientFor(base: string): KeepAliveClient {
  let client = clients.get(base)
  if (client === undefined) clients.set(base, (client = new KeepAliveClient(base)))
  return client
}

/**
 * Before an open loop, the keep-alive client holds as many connections as a whole budget's worth
 * of requests at the offered rate, opened 128 at a time, as a partner's pool of persistent
 * connections would be: more requests can never be outstanding while the server keeps the budget.
 * (Opening connections only when none was idle opened them in storms once answers slowed, and
 * storms larger than Bun.serve's accept queue of 512 had SYNs dropped, each costing its request a
 * one-second retransmission: `nstat` counted ListenOverflows in runs with answers over 1 s.)
 */
async function warmConnections(base: string, rate: number): Promise<void> {
  if (CLIENT === 'fetch') return
  await clientFor(base).warm(Math.ceil((rate * BUDGET_MS) / 1000))
}

/** Stops the server, closing the load generator's connections to it first. */
async function stopServer(server: ServerProcess): Promise<void> {
  clients.get(server.base)?.close()
  clients.delete(server.base)
  await server.stop()
}

/** An open loop's answer slower than `SLOW_MS`: wall-clock times (Unix epoch ms) and its payment, if any. */
interface SlowAnswer {
  dueAt: number
  sentAt: number
  answeredAt: number
  paymentId: string | null
}

/**
 * Where the answers slower than `SLOW_MS` spent their time, summed over them (ms). For an answer the
 * server's log has (by payment id): the generator sending late, the request waiting before the server
 * read it (kernel queues, the server's loop busy or not running), the server's phases (an approval's
 * four; a decline whole), and the answer's way back until the generator read it. An answer the log
 * does not have (under the log's threshold in the server, a refusal, or overwritten) has only its
 * lateness split off: the rest is `notInLog`.
 */
interface SlowBreakdown {
  thresholdMs: number
  count: number
  /** Found in the server's log. */
  matched: number
  /** The answers by kind: the log's state and failure code (`authorized`, `declined processing_timeout`, …), `without a payment` for a 429 or an error, `not in the log` for the rest. */
  kinds: Record<string, number>
  ms: { late: number; toServer: number; beforeWriter: number; queued: number; commit: number; afterCommit: number; declineInServer: number; toGenerator: number; notInLog: number }
}

/** `slow`: the answers over `thresholdMs`, already picked by the caller. */
function whereSlowAnswersWent(slow: SlowAnswer[], byId: Map<string, SlowAuthorization>, thresholdMs: number): SlowBreakdown {
  const ms = { late: 0, toServer: 0, beforeWriter: 0, queued: 0, commit: 0, afterCommit: 0, declineInServer: 0, toGenerator: 0, notInLog: 0 }
  const kinds: Record<string, number> = {}
  let matched = 0
  for (const answer of slow) {
    ms.late += answer.sentAt - answer.dueAt
    const entry = answer.paymentId === null ? undefined : byId.get(answer.paymentId)
    const kind = entry === undefined ? (answer.paymentId === null ? 'without a payment' : 'not in the log') : entry.failureCode === null ? entry.state : `${entry.state} ${entry.failureCode}`
    kinds[kind] = (kinds[kind] ?? 0) + 1
    if (entry === undefined) {
      ms.notInLog += answer.answeredAt - answer.sentAt
      continue
    }
    matched += 1
    ms.toServer += entry.arrivedAtMs - answer.sentAt
    if (entry.phases === null) ms.declineInServer += entry.totalMs
    else {
      ms.beforeWriter += entry.phases.beforeWriterMs
      ms.queued += entry.phases.queuedMs
      ms.commit += entry.phases.commitMs
      ms.afterCommit += entry.phases.afterCommitMs
    }
    ms.toGenerator += answer.answeredAt - (entry.arrivedAtMs + entry.totalMs)
  }
  return { thresholdMs, count: slow.length, matched, kinds, ms: Object.fromEntries(Object.entries(ms).map(([name, value]) => [name, round2(value)])) as SlowBreakdown['ms'] }
}

/** The slow answers' breakdown as one cell of text: each part's sum and its share of the whole. */
function slowBreakdownText(breakdown: SlowBreakdown | undefined): string {
  if (breakdown === undefined) return ''
  if (breakdown.count === 0) return `none over ${breakdown.thresholdMs} ms`
  const parts: Array<[string, number]> = [
    ['sent late', breakdown.ms.late],
    ['before the server read it', breakdown.ms.toServer],
    ['before the writer', breakdown.ms.beforeWriter],
    ['queued', breakdown.ms.queued],
    ['commit', breakdown.ms.commit],
    ['after the commit', breakdown.ms.afterCommit],
    ['declines in the server', breakdown.ms.declineInServer],
    ['back to the generator', breakdown.ms.toGenerator],
    ['not in the log', breakdown.ms.notInLog],
  ]
  const total = parts.reduce((sum, [, value]) => sum + value, 0)
  const shown = parts.filter(([, value]) => value !== 0).map(([name, value]) => `${name} ${Math.round(value)} (${Math.round((value / total) * 100)}%)`)
  return `${breakdown.count} answers (${kindsText(breakdown.kinds)}), ${breakdown.matched} in the server's log; ms: ${shown.join(', ')}`
}

/** The markdown table of the open loops' answers over the budget, per answer; one line when there were none. */
function overBudgetTable(figures: LoadFigures[]): string[] {
  const rows = figures
    .filter((figure) => figure.overBudgetAnswers !== undefined && figure.overBudgetAnswers.count > 0)
    .map((figure) => {
      const over = figure.overBudgetAnswers!
      const mean = (ms: number) => round2(ms / over.count)
      return `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${over.count} | ${kindsText(over.kinds)} | ${over.matched} | ${mean(over.ms.late)} | ${mean(over.ms.toServer)} | ${mean(over.ms.beforeWriter)} | ${mean(over.ms.queued)} | ${mean(over.ms.commit)} | ${mean(over.ms.afterCommit)} | ${mean(over.ms.declineInServer)} | ${mean(over.ms.toGenerator)} | ${mean(over.ms.notInLog)} |`
    })
  if (rows.length === 0) return [`No answer of an open loop came more than ${BUDGET_MS} ms after it was due.`]
  return [
    "| group commit | load | answers | by kind | in the server's log | sent late | before the server read it | before the writer | queued | commit | after the commit | declines in the server | back to the generator | not in the log |",
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
  ]
}

function kindsText(kinds: Record<string, number>): string {
  return Object.entries(kinds)
    .sort(([, a], [, b]) => b - a)
    .map(([kind, count]) => `${count} ${kind}`)
    .join(', ')
}

class Recorder {
  latencies: number[] = []
  /** The same latencies by answer: approved, declined and refused (429). */
  byAnswer = { approved: [] as number[], declined: [] as number[], refused: [] as number[] }
  /** Open loop: each answer's latency from when its request was sent (the generator's lateness left out). */
  fromSend: number[] = []
  approved = 0
  declined = 0
  /** The declines by `failureCode`. */
  declineCodes = new Map<string, number>()
  refused = 0
  /** Approvals answered after the budget (they count in `overBudget` too). */
  approvedOverBudget = 0
  errors = 0
  /** What the errors were: HTTP status and error code, or the exception. */
  errorKinds = new Map<string, number>()
  recording = false
  /** When the last recorded answer arrived (`performance.now()`). */
  lastAnsweredAt = 0

  /** Open loop: the answers slower than `SLOW_MS`, with their times (wall clock, ms) and payment. */
  slow: SlowAnswer[] = []

  async record(started: number, response: Promise<HttpAnswer>, sentAt?: number): Promise<void> {
    let state: string | undefined
    let kind = ''
    let failureCode = ''
    let body = ''
    try {
      const answer = await response
      body = answer.body
      // A 201 names its state near the start of the body; only other answers are parsed whole.
      const stateAt = answer.status === 201 ? answer.body.indexOf('"state":"') : -1
      if (stateAt >= 0) {
        state = answer.body.slice(stateAt + 9, answer.body.indexOf('"', stateAt + 9))
        if (state === 'declined') {
          const codeAt = answer.body.indexOf('"failureCode":"')
          failureCode = codeAt < 0 ? '(none)' : answer.body.slice(codeAt + 15, answer.body.indexOf('"', codeAt + 15))
        }
      } else {
        const body = JSON.parse(answer.body) as { state?: string; error?: { code: string } }
        state = answer.status === 201 ? body.state : undefined
        kind = `${answer.status} ${body.error?.code ?? ''}`
      }
    } catch (error) {
      state = undefined
      kind = String(error)
    }
    if (!this.recording) return
    this.lastAnsweredAt = performance.now()
    const latency = this.lastAnsweredAt - started
    this.latencies.push(latency)
    if (sentAt !== undefined) {
      this.fromSend.push(this.lastAnsweredAt - sentAt)
      if (latency >= SLOW_MS) {
        const idAt = state === undefined ? -1 : body.indexOf('"id":"')
        const paymentId = idAt < 0 ? null : body.slice(idAt + 6, body.indexOf('"', idAt + 6))
        const origin = performance.timeOrigin
        this.slow.push({ dueAt: origin + started, sentAt: origin + sentAt, answeredAt: origin + this.lastAnsweredAt, paymentId })
      }
    }
    if (state === 'authorized') {
      this.approved += 1
      this.byAnswer.approved.push(latency)
      if (latency > BUDGET_MS) this.approvedOverBudget += 1
    } else if (state === 'declined') {
      this.declined += 1
      this.byAnswer.declined.push(latency)
      this.declineCodes.set(failureCode, (this.declineCodes.get(failureCode) ?? 0) + 1)
    } else if (kind === '429 rate_limited') {
      this.refused += 1
      this.byAnswer.refused.push(latency)
    } else {
      this.errors += 1
      this.errorKinds.set(kind, (this.errorKinds.get(kind) ?? 0) + 1)
    }
  }
}

interface WriterStats {
  committedOperations: number
  committedBatches: number
  eventLoopLagMs: number
  /** With `lagSince`: the loop's lateness after that moment only. */
  eventLoopLagSinceMs?: number
  commitLatencyMs: HistogramSnapshot
  queueWaitMs: HistogramSnapshot
  durableMs: HistogramSnapshot
}

/** p99 and max of each kind of answer. */
function answerFigures(recorder: Recorder): LoadFigures['byAnswer'] {
  const figure = (latencies: number[]) => {
    latencies.sort((a, b) => a - b)
    return { count: latencies.length, p99Ms: round2(percentile(latencies, 0.99)), maxMs: round2(latencies.at(-1) ?? 0) }
  }
  return { approved: figure(recorder.byAnswer.approved), declined: figure(recorder.byAnswer.declined), refused: figure(recorder.byAnswer.refused) }
}

/** The p99 and max of each kind of answer a run had. */
function byAnswerCell(figure: LoadFigures): string {
  const parts = (['approved', 'declined', 'refused'] as const).filter((kind) => figure.byAnswer[kind].count > 0).map((kind) => `${kind} ${figure.byAnswer[kind].p99Ms}/${figure.byAnswer[kind].maxMs}`)
  return parts.length === 0 ? '-' : parts.join(', ')
}

/**
 * The busiest Postgres process's CPU (the writer's backend) per approval rather than per answer:
 * refusals never reach Postgres, so past capacity the per-answer figure hides what an approval
 * costs the writer's one serial connection. Declines recorded by the writer count with the
 * approvals they share batches with; this is the approvals' upper bound.
 */
function busiestPerApproval(figure: LoadFigures): number {
  return figure.approved === 0 ? 0 : round2((figure.cpu.postgresBusiestUs * figure.answered) / figure.approved)
}

/** A run's declines and, when there were any, their codes. */
function declinedCell(figure: LoadFigures): string {
  const codes = Object.entries(figure.declineCodes)
  return codes.length === 0 ? String(figure.declined) : `${figure.declined} (${codes.map(([code, count]) => `${count} ${code}`).join(', ')})`
}

/** `lagSince` (milliseconds since the Unix epoch) adds the loop's lateness after that moment alone. */
async function writerStats(base: string, lagSince?: number): Promise<WriterStats> {
  return (await call(base, 'GET', `/ops/v1/ledger/stats${lagSince === undefined ? '' : `?lagSince=${lagSince}`}`, OPERATOR_TOKEN)).body
}

/** The writer's counters and the server's own authorization latencies (arrival to answer), read before and after a run. */
interface ServerStats extends WriterStats {
  answerLatencyMs: HistogramSnapshot
  /** Authorizations shed since the server started. */
  shed: number
  /** Late ticks since the server started that shed nothing because its thread was stopped, not busy. */
  stalls: number
  /** The Postgres server's checkpoints and WAL, read at the same moment. */
  postgres: PostgresActivity
}

interface SlowPage {
  recorded: number
  hasMore: boolean
  authorizations: Array<SlowAuthorization & { seq: number }>
}

/** How many slow authorizations the server has recorded so far: the cursor a run's own start from. */
async function slowRecorded(base: string): Promise<number> {
  return ((await call(base, 'GET', '/ops/v1/payments/slow?limit=1', OPERATOR_TOKEN)).body as SlowPage).recorded
}

/**
 * The slow authorizations the server recorded after `after` that it still keeps, read a page at a
 * time: the log read whole held the server's thread for up to 633 ms (docs/architecture.md, "Where a
 * slow authorization's time went").
 */
async function slowSince(base: string, after: number): Promise<SlowAuthorization[]> {
  const entries: SlowAuthorization[] = []
  for (;;) {
    const page = (await call(base, 'GET', `/ops/v1/payments/slow?after=${after}&limit=1000`, OPERATOR_TOKEN)).body as SlowPage
    entries.push(...page.authorizations)
    if (!page.hasMore) return entries
    after = page.authorizations.at(-1)!.seq
  }
}

async function serverStats(base: string): Promise<ServerStats> {
  const [writer, payments, activity] = await Promise.all([writerStats(base), call(base, 'GET', '/ops/v1/payments/stats', OPERATOR_TOKEN), postgresActivity()])
  return { ...writer, answerLatencyMs: payments.body.answerLatencyMs, shed: payments.body.shedding.shed, stalls: payments.body.shedding.stalls, postgres: activity }
}

function summarize(mode: string, groupCommit: boolean, recorder: Recorder, elapsedMs: number, extra: { offered?: number; connections?: number; before: ServerStats; after: ServerStats; cpuBefore: CpuSnapshot; cpuAfter: CpuSnapshot }): LoadFigures {
  const sorted = recorder.latencies.sort((a, b) => a - b)
  const batches = extra.after.committedBatches - extra.before.committedBatches
  const operations = extra.after.committedOperations - extra.before.committedOperations
  const commits = histogramBetween(extra.before.commitLatencyMs, extra.after.commitLatencyMs)
  const queued = histogramBetween(extra.before.queueWaitMs, extra.after.queueWaitMs)
  const durable = histogramBetween(extra.before.durableMs, extra.after.durableMs)
  const served = histogramBetween(extra.before.answerLatencyMs, extra.after.answerLatencyMs)
  return {
    mode,
    groupCommit,
    offeredPerSecond: extra.offered ?? null,
    connections: extra.connections ?? null,
    durationMs: Math.round(elapsedMs),
    answered: sorted.length,
    approved: recorder.approved,
    declined: recorder.declined,
    declineCodes: Object.fromEntries(recorder.declineCodes),
    refused: recorder.refused,
    shed: extra.after.shed - extra.before.shed,
    stalls: extra.after.stalls - extra.before.stalls,
    errors: recorder.errors,
    errorKinds: Object.fromEntries(recorder.errorKinds),
    throughputPerSecond: Math.round((recorder.approved / elapsedMs) * 1000),
    p50Ms: round2(percentile(sorted, 0.5)),
    p99Ms: round2(percentile(sorted, 0.99)),
    maxMs: round2(sorted.at(-1) ?? 0),
    byAnswer: answerFigures(recorder),
    overBudget: sorted.filter((latency) => latency > BUDGET_MS).length,
    approvedOverBudget: recorder.approvedOverBudget,
    transactionsPerSecond: Math.round((batches / elapsedMs) * 1000),
    operationsPerTransaction: batches === 0 ? 0 : round2(operations / batches),
    commits: { count: commits.count, over3Ms: countAbove(commits, 3), over20Ms: countAbove(commits, 20), p99AtMostMs: quantileBound(commits, 0.99) },
    queued: { count: queued.count, over1Ms: countAbove(queued, 1), over3Ms: countAbove(queued, 3), p99AtMostMs: quantileBound(queued, 0.99) },
    durable: { count: durable.count, over3Ms: countAbove(durable, 3), p50AtMostMs: quantileBound(durable, 0.5), p99AtMostMs: quantileBound(durable, 0.99) },
    served: { count: served.count, over3Ms: countAbove(served, 3), p50AtMostMs: quantileBound(served, 0.5), p99AtMostMs: quantileBound(served, 0.99) },
    cpu: cpuPerOperation(extra.cpuBefore, extra.cpuAfter, sorted.length),
    postgres: {
      checkpoints: extra.after.postgres.checkpoints - extra.before.postgres.checkpoints,
      checkpointSyncMs: Math.round(extra.after.postgres.checkpointSyncMs - extra.before.postgres.checkpointSyncMs),
      walKbPerAnswer: sorted.length === 0 ? 0 : round2((extra.after.postgres.walBytes - extra.before.postgres.walBytes) / 1024 / sorted.length),
    },
  }
}

/** As many keep-alive connections as configured, each sending its next request when the last is answered. */
async function closedLoop(base: string, serverPid: number, targets: Target[], groupCommit: boolean): Promise<LoadFigures> {
  const recorder = new Recorder()
  let stop = false
  const connection = async (index: number) => {
    let turn = index
    while (!stop) {
      const target = targets[turn % targets.length]!
      turn += CONNECTIONS
      const started = performance.now()
      await recorder.record(started, authorize(base, target))
    }
  }
  const running = Array.from({ length: CONNECTIONS }, (_, index) => connection(index))
  await Bun.sleep(WARMUP_MS)
  const before = await serverStats(base)
  const cpuBefore = cpuSnapshot(serverPid)
  recorder.recording = true
  const startedAt = performance.now()
  await Bun.sleep(DURATION_MS)
  recorder.recording = false
  const cpuAfter = cpuSnapshot(serverPid)
  const elapsed = performance.now() - startedAt
  const after = await serverStats(base)
  stop = true
  await Promise.all(running)
  return summarize(`closed loop, ${CONNECTIONS} connections`, groupCommit, recorder, elapsed, {
    connections: CONNECTIONS,
    before,
    after,
    cpuBefore,
    cpuAfter,
  })
}

/**
 * Sends on a fixed schedule whatever the answers do. Each request's latency counts from the time it
 * was due, so a stall shows up in every request it delayed.
 */
async function openLoop(base: string, serverPid: number, targets: Target[], rate: number, groupCommit: boolean): Promise<LoadFigures> {
  const recorder = new Recorder()
  // Requests still unanswered, counted rather than kept (the generator's own CPU is taken from the machine measured).
  let outstanding = 0
  let allAnswered: (() => void) | undefined
  const answered = () => {
    outstanding -= 1
    if (outstanding === 0) allAnswered?.()
  }
  let sent = 0
  const send = (startedAt: number, sentAt: number) => {
    const target = targets[sent % targets.length]!
    sent += 1
    outstanding += 1
    void recorder.record(startedAt, authorize(base, target), sentAt).then(answered)
  }
  const drive = (durationMs: number) => paced(rate, durationMs, send)
  await warmConnections(base, rate)
  await drive(WARMUP_MS)
  const before = await serverStats(base)
  const slowBefore = await slowRecorded(base)
  const cpuBefore = cpuSnapshot(serverPid)
  recorder.recording = true
  const drivenFrom = performance.now()
  // The server's own event-loop lag meanwhile: time its requests waited in the server before any
  // of their code ran (a late answer with a small lag waited in the load generator or the kernel).
  // Only its lateness after the run began (`lagSince`): the lag of the last 200 to 400 ms, as read
  // at the start, can hold lateness from the warm-up before it.
  let sampling = true
  let serverLagMaxMs = 0
  const lagSince = Math.floor(performance.timeOrigin + drivenFrom)
  const sampler = (async () => {
    while (sampling) {
      serverLagMaxMs = Math.max(serverLagMaxMs, (await writerStats(base, lagSince)).eventLoopLagSinceMs ?? 0)
      await Bun.sleep(100)
    }
  })()
  const { lateMaxMs } = await drive(DURATION_MS)
  sampling = false
  await sampler
  if (outstanding > 0) await new Promise<void>((resolve) => (allAnswered = resolve))
  recorder.recording = false
  const cpuAfter = cpuSnapshot(serverPid)
  const after = await serverStats(base)
  const byId = new Map((await slowSince(base, slowBefore)).filter((entry) => entry.paymentId !== null).map((entry) => [entry.paymentId!, entry]))
  // The recorder keeps only the answers over SLOW_MS; of them, those over the budget.
  const slowAnswers = whereSlowAnswersWent(recorder.slow, byId, SLOW_MS)
  const overBudgetAnswers = whereSlowAnswersWent(recorder.slow.filter((answer) => answer.answeredAt - answer.dueAt > BUDGET_MS), byId, BUDGET_MS)
  // Until the last answer: a server that falls behind is credited only with what it answered.
  const elapsed = Math.max(DURATION_MS, recorder.lastAnsweredAt - drivenFrom)
  return {
    ...summarize(`open loop, ${rate}/s offered`, groupCommit, recorder, elapsed, {
      offered: rate,
      before,
      after,
      cpuBefore,
      cpuAfter,
    }),
    p99FromSendMs: round2(percentile(recorder.fromSend.sort((a, b) => a - b), 0.99)),
    slowAnswers,
    overBudgetAnswers,
    serverLagMaxMs: round2(serverLagMaxMs),
    generatorLateMaxMs: round2(lateMaxMs),
  }
}

/**
 * The same open-loop runs with and without webhook delivery load: every organization has 10
 * endpoints (real HTTPS receivers in this process) subscribed to its payment events, so each
 * authorization is delivered 10 times while the next ones are being decided. With load twice: the
 * server's own default (on Postgres, the delivery worker in a process of its own at the lowest
 * priority, committing without waiting for the disk), and a second server with the worker on its
 * request thread (`WEBHOOK_DELIVERY_PROCESS=false`, as every server ran it before).
 */
async function webhookLoadRuns(): Promise<LoadFigures[]> {
  const load = createWebhookLoad(10)
  const figures: LoadFigures[] = []
  try {
    for (const inServer of [false, true]) {
      const database = await createBenchDatabase(inServer ? 'authorize_webhooks_inline' : 'authorize_webhooks')
      const server = await startServer({
        ...database.serverEnv,
        RATE_LIMIT_STORE: 'postgres',
        SLOW_AUTHORIZATION_MS: SLOW_LOG_SERVER_MS,
        SLOW_AUTHORIZATIONS_KEPT: SLOW_LOG_KEPT,
        ...load.serverEnv,
        ...(inServer ? { WEBHOOK_DELIVERY_PROCESS: 'false' } : {}),
      })
      try {
        const orgs: BenchOrg[] = []
        for (let index = 0; index < 2; index++) orgs.push(await createFundedOrg(server.base, `hooks-${index}`, ACCOUNTS, '10000000'))
        const targets = targetsOf(orgs)
        for (const withHooks of inServer ? [true] : [false, true]) {
          if (withHooks) for (const org of orgs) await load.register(server.base, org.key, ['payment.*'])
          const deliveredBefore = load.deliveries.length
          const result = await openLoop(server.base, server.process.pid, targets, WEBHOOK_RATE, true)
          result.mode = `open loop, ${WEBHOOK_RATE}/s offered, ${!withHooks ? 'no webhook endpoints' : inServer ? '10 endpoints per org, delivery in the server' : '10 endpoints per org'}`
          result.deliveriesReceived = load.deliveries.length - deliveredBefore
          console.log(`webhooks | ${result.mode.padEnd(62)} | p50 ${result.p50Ms} ms | p99 ${result.p99Ms} ms | max ${result.maxMs} ms | deliveries received during the run: ${result.deliveriesReceived}`)
          figures.push(result)
        }
      } finally {
        await stopServer(server)
        await database.drop()
      }
    }
    return figures
  } finally {
    load.stop()
  }
}

async function httpRuns(groupCommit: boolean): Promise<LoadFigures[]> {
  const database = await createBenchDatabase(groupCommit ? 'authorize_on' : 'authorize_off')
  const server = await startServer({ ...database.serverEnv, GROUP_COMMIT: String(groupCommit), RATE_LIMIT_STORE: 'postgres', SLOW_AUTHORIZATION_MS: SLOW_LOG_SERVER_MS, SLOW_AUTHORIZATIONS_KEPT: SLOW_LOG_KEPT })
  try {
    const orgs: BenchOrg[] = []
    for (let index = 0; index < ORGS; index++) orgs.push(await createFundedOrg(server.base, `bench-${index}`, ACCOUNTS, '10000000'))
    const targets = targetsOf(orgs)
    const figures: LoadFigures[] = []
    const print = (result: LoadFigures) => {
      console.log(
        `${groupCommit ? 'group commit on ' : 'group commit off'} | ${result.mode.padEnd(32)} | ${String(result.throughputPerSecond).padStart(6)}/s approved | p50 ${result.p50Ms} ms | p99 ${result.p99Ms} ms${result.p99FromSendMs === undefined ? '' : ` (from send ${result.p99FromSendMs} ms)`} | max ${result.maxMs} ms | p99/max ms by answer: ${byAnswerCell(result)} | >${BUDGET_MS} ms: ${result.overBudget} (approved ${result.approvedOverBudget}) | declined ${declinedCell(result)} | refused ${result.refused} (shed ${result.shed}) | loop stalls ${result.stalls} | errors ${result.errors} | ${result.operationsPerTransaction} ops/tx${result.serverLagMaxMs === undefined ? '' : ` | server loop lag max ${result.serverLagMaxMs} ms | generator sent late by up to ${result.generatorLateMaxMs} ms`} | commits ${result.commits.count}, >3 ms ${result.commits.over3Ms}, >20 ms ${result.commits.over20Ms}, p99 <= ${result.commits.p99AtMostMs ?? '>1000'} ms | queued >1 ms ${result.queued.over1Ms}, >3 ms ${result.queued.over3Ms} of ${result.queued.count} | queued to durable: p50 <= ${result.durable.p50AtMostMs ?? '>1000'} ms, p99 <= ${result.durable.p99AtMostMs ?? '>1000'} ms, >3 ms ${result.durable.over3Ms} | in the server: p50 <= ${result.served.p50AtMostMs ?? '>1000'} ms, p99 <= ${result.served.p99AtMostMs ?? '>1000'} ms, >3 ms ${result.served.over3Ms} | CPU per answer: generator ${result.cpu.generatorUs} µs, server ${result.cpu.serverUs} µs (main thread ${result.cpu.serverMainUs}, ${result.cpu.serverFaultsPerAnswer} page faults), Postgres ${result.cpu.postgresUs} µs (its busiest process ${result.cpu.postgresBusiestUs} µs, ${result.cpu.postgresBusiestPercent}%; per approval ${busiestPerApproval(result)} µs), machine ${result.cpu.machineBusyPercent}% busy, ${result.cpu.machineStolenMs} ms stolen by the host, at this cost every core busy gives at most ${result.cpu.allCoresCeilingPerSecond}/s | waited for a core: generator ${result.cpu.generatorMainWaitPercent}%, server ${result.cpu.serverMainWaitPercent}%, Postgres ${result.cpu.postgresWaitPercent}% of the run | Postgres: ${result.postgres.checkpoints} checkpoints begun (syncs ${result.postgres.checkpointSyncMs} ms), WAL ${result.postgres.walKbPerAnswer} KB per answer${result.slowAnswers === undefined ? '' : ` | over ${SLOW_MS} ms: ${slowBreakdownText(result.slowAnswers)}`}${result.overBudgetAnswers === undefined || result.overBudgetAnswers.count === 0 ? '' : ` | over ${BUDGET_MS} ms: ${slowBreakdownText(result.overBudgetAnswers)}`}${result.errors > 0 ? ` | ${JSON.stringify(result.errorKinds)}` : ''}`,
      )
      figures.push(result)
    }
    if (process.env.BENCH_SKIP_CLOSED !== '1') print(await closedLoop(server.base, server.process.pid, targets, groupCommit))
    for (const rate of RATES) print(await openLoop(server.base, server.process.pid, targets, rate, groupCommit))
    const verify = (await call(server.base, 'GET', '/ops/v1/ledger/verify', OPERATOR_TOKEN)).body
    if (!verify.ok) console.error('ledger verify failed after the run', verify.problems)
    return figures
  } finally {
    await stopServer(server)
    await database.drop()
  }
}

interface OutagePhase {
  phase: string
  answered: number
  approved: number
  declined: number
  /** Refused 429 `rate_limited` (shed: the server's loop ran late tick after tick). */
  refused: number
  errors: number
  p99Ms: number
  maxMs: number
  overBudget: number
}

/**
 * The budget while the database is unreachable: 1000/s offered through a TCP proxy between the
 * server and Postgres, which forwards, then stalls (no bytes either way), then refuses connections,
 * then forwards again. Latency counts from each request's due time.
 */
async function outageRun(): Promise<OutagePhase[]> {
  const rate = 1000
  const phaseMs = 3000
  const database = await createBenchDatabase('authorize_outage')
  const proxy = await TcpProxy.start('127.0.0.1', Number(new URL(database.url).port || 5432))
  const server = await startServer({ DATABASE_URL: proxy.rewrite(database.url), RATE_LIMIT_STORE: 'postgres' })
  try {
    const targets = targetsOf([await createFundedOrg(server.base, 'outage', 16, '10000000')])
    const phases: Array<[string, () => Promise<void>]> = [
      ['database reachable', () => proxy.setMode('forwarding')],
      ['database stalled (no bytes either way)', () => proxy.setMode('stalled')],
      ['database refusing connections', () => proxy.setMode('closed')],
      ['database back', () => proxy.setMode('forwarding')],
    ]
    const figures: OutagePhase[] = []
    for (const [phase, enter] of phases) {
      await enter()
      const recorder = new Recorder()
      recorder.recording = true
      const outstanding: Promise<void>[] = []
      let sent = 0
      await paced(rate, phaseMs, (startedAt) => {
        outstanding.push(recorder.record(startedAt, authorize(server.base, targets[sent % targets.length]!)))
        sent += 1
      })
      await Promise.all(outstanding)
      const sorted = recorder.latencies.sort((a, b) => a - b)
      const figure = {
        phase,
        answered: sorted.length,
        approved: recorder.approved,
        declined: recorder.declined,
        refused: recorder.refused,
        errors: recorder.errors,
        p99Ms: round2(percentile(sorted, 0.99)),
        maxMs: round2(sorted.at(-1) ?? 0),
        overBudget: sorted.filter((latency) => latency > BUDGET_MS).length,
      }
      console.log(`outage | ${phase.padEnd(40)} | approved ${figure.approved} | declined ${figure.declined} | refused ${figure.refused} | errors ${figure.errors} | p99 ${figure.p99Ms} ms | max ${figure.maxMs} ms | >${BUDGET_MS} ms: ${figure.overBudget}`)
      figures.push(figure)
    }
    return figures
  } finally {
    await stopServer(server)
    await proxy.close()
    await database.drop()
  }
}

/**
 * What the disk gives: the latency of a bare durable commit (one row, autocommit, fsync on), one
 * at a time on one connection. No approval can be faster than its commit's flush.
 */
async function commitFloor(): Promise<{ commits: number; p50Ms: number; p90Ms: number; p99Ms: number; maxMs: number }> {
  const database = await createBenchDatabase('commit_floor')
  const folder = benchSocketFolder()
  const client = postgres(database.url, { max: 1, onnotice: () => {}, ...(folder === undefined ? {} : { host: folder }) })
  try {
    await client`create table floor_probe (id bigserial primary key, at timestamptz not null default now())`
    const commits = 3000
    const latencies: number[] = []
    for (let index = 0; index < commits; index++) {
      const started = performance.now()
      await client`insert into floor_probe default values`
      latencies.push(performance.now() - started)
    }
    latencies.sort((a, b) => a - b)
    const figure = { commits, p50Ms: round2(percentile(latencies, 0.5)), p90Ms: round2(percentile(latencies, 0.9)), p99Ms: round2(percentile(latencies, 0.99)), maxMs: round2(latencies.at(-1)!) }
    console.log(`floor | one durable commit of one row | p50 ${figure.p50Ms} ms | p90 ${figure.p90Ms} ms | p99 ${figure.p99Ms} ms | max ${figure.maxMs} ms`)
    return figure
  } finally {
    await client.end()
    await database.drop()
  }
}

/**
 * The process tunings, each measured with and without in this one run: a server started as
 * `npm start` starts it, and one with each tuning undone, each on a fresh database, its closed loop
 * and then 1000/s offered. `startMs` is from spawning the server to its listening line.
 */
interface TuningFigures {
  variant: string
  env: Record<string, string>
  startMs: number
  closed: LoadFigures
  at1000: LoadFigures
}

const TUNING_VARIANTS: Array<{ variant: string; env: Record<string, string> }> = [
  { variant: 'as npm start', env: {} },
  { variant: 'no warm-up before listening', env: { WARM_UP_AUTHORIZATIONS: '0' } },
]

async function tuningRuns(): Promise<TuningFigures[]> {
  const variants = (process.env.BENCH_TUNINGS ?? '').split(',').filter((name) => name !== '')
  const figures: TuningFigures[] = []
  for (const { variant, env } of TUNING_VARIANTS.filter((entry, index) => variants.length === 0 || variants.includes(String(index)))) {
    const database = await createBenchDatabase('authorize_tuning')
    const spawnedAt = performance.now()
    const server = await startServer({ ...database.serverEnv, RATE_LIMIT_STORE: 'postgres', SLOW_AUTHORIZATION_MS: SLOW_LOG_SERVER_MS, SLOW_AUTHORIZATIONS_KEPT: SLOW_LOG_KEPT, ...env })
    const startMs = Math.round(performance.now() - spawnedAt)
    try {
      const orgs: BenchOrg[] = []
      for (let index = 0; index < ORGS; index++) orgs.push(await createFundedOrg(server.base, `tuning-${index}`, ACCOUNTS, '10000000'))
      const targets = targetsOf(orgs)
      const closed = await closedLoop(server.base, server.process.pid, targets, true)
      const at1000 = await openLoop(server.base, server.process.pid, targets, 1000, true)
      console.log(`tuning | ${variant.padEnd(64)} | start ${startMs} ms | closed loop ${closed.throughputPerSecond}/s, p99 ${closed.p99Ms} ms | 1000/s p99 ${at1000.p99Ms} ms, max ${at1000.maxMs} ms | server CPU per answer ${closed.cpu.serverUs} and ${at1000.cpu.serverUs} µs`)
      figures.push({ variant, env, startMs, closed, at1000 })
    } finally {
      await stopServer(server)
      await database.drop()
    }
  }
  return figures
}

interface TargetRow {
  what: string
  kassa: string
  floorName: string
  floor: string
  ratio: number | null
  target: string
  met?: boolean
}

/** Each target figure of this run beside the floor measured in this run, and their ratio. */
function targetRows(): TargetRow[] {
  const rows: TargetRow[] = []
  const kassa1000 = on.find((figure) => figure.offeredPerSecond === 1000)
  const kassaClosed = on.find((figure) => figure.connections !== null)
  const group1000 = latencyFloors.find((floor) => floor.server === 'group' && floor.rate === 1000)
  const commit1000 = latencyFloors.find((floor) => floor.server === 'commit' && floor.rate === 1000)
  const bare1000 = latencyFloors.find((floor) => floor.server === 'bare' && floor.rate === 1000)
  const groupClosed = closedFloors.find((floor) => floor.server === 'group')
  const bareClosed = closedFloors.find((floor) => floor.server === 'bare')
  if (kassa1000 && group1000) {
    const ratio = round2(kassa1000.p99Ms / group1000.p99Ms)
    rows.push({ what: 'p99 at 1000/s offered', kassa: `${kassa1000.p99Ms} ms`, floorName: 'group', floor: `${group1000.p99Ms} ms`, ratio, target: 'at most 1.5x', met: ratio <= 1.5 })
  }
  if (kassa1000 && commit1000) rows.push({ what: 'p99 at 1000/s offered', kassa: `${kassa1000.p99Ms} ms`, floorName: 'commit, one row per request', floor: `${commit1000.p99Ms} ms`, ratio: round2(kassa1000.p99Ms / commit1000.p99Ms), target: '(for reference)' })
  if (kassa1000 && bare1000) rows.push({ what: 'p99 at 1000/s offered', kassa: `${kassa1000.p99Ms} ms`, floorName: 'bare server', floor: `${bare1000.p99Ms} ms`, ratio: round2(kassa1000.p99Ms / bare1000.p99Ms), target: '(for reference)' })
  if (kassaClosed && groupClosed) {
    const ratio = round2(kassaClosed.throughputPerSecond / groupClosed.throughputPerSecond)
    rows.push({ what: `closed-loop throughput, ${CONNECTIONS} connections`, kassa: `${kassaClosed.throughputPerSecond}/s`, floorName: 'group', floor: `${groupClosed.throughputPerSecond}/s`, ratio, target: 'at least 0.7x', met: ratio >= 0.7 })
  }
  if (kassaClosed && bareClosed) rows.push({ what: `closed-loop throughput, ${CONNECTIONS} connections`, kassa: `${kassaClosed.throughputPerSecond}/s`, floorName: 'bare server', floor: `${bareClosed.throughputPerSecond}/s`, ratio: round2(kassaClosed.throughputPerSecond / bareClosed.throughputPerSecond), target: '(for reference)' })
  const loads = [...on, ...webhooks, ...tunings.flatMap((tuning) => [tuning.closed, tuning.at1000])]
  if (loads.length > 0 || outage.length > 0) {
    const max = Math.max(...loads.map((figure) => figure.maxMs), ...outage.map((phase) => phase.maxMs))
    const over = loads.reduce((sum, figure) => sum + figure.overBudget, 0) + outage.reduce((sum, phase) => sum + phase.overBudget, 0)
    rows.push({ what: 'slowest answer, every load with group commit on (database cut off included)', kassa: `${max} ms (${over} over 500 ms)`, floorName: 'the budget', floor: '500 ms', ratio: round2(max / 500), target: 'none over 500 ms', met: over === 0 })
  }
  return rows
}

/** BENCH_ONLY (comma-separated: floor, mitata, on, off, outage, webhooks, tuning) runs a subset. */
const only = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',')) : undefined
const wanted = (part: string, skipped = false) => (only ? only.has(part) : !skipped)
const floor = wanted('floor') ? await commitFloor() : undefined
// At 1000/s, one durable row per request; at the 10,000/s target, the least a group commit does there.
// The group floor at 10,000/s only when Kassa is offered that much too (BENCH_RATES).
const latencyFloors = wanted('floor') ? [...(await measureLatencyFloors(['bare', 'commit', 'group'])), ...(RATES.some((rate) => rate >= GROUP_FLOOR_RATE) ? await measureLatencyFloors(['group'], GROUP_FLOOR_RATE) : [])] : []
const closedFloors: ClosedLoopFloor[] = []
if (wanted('floor')) for (const kind of ['bare', 'group']) closedFloors.push(await measureClosedLoopFloor(kind, CONNECTIONS))
const inProcessFigures = wanted('mitata') ? await inProcess() : []
const on = wanted('on') ? await httpRuns(true) : []
const off = wanted('off', SKIP_OFF) ? await httpRuns(false) : []
const outage = wanted('outage', process.env.BENCH_SKIP_OUTAGE === '1') ? await outageRun() : []
const webhooks = wanted('webhooks', process.env.BENCH_SKIP_WEBHOOKS === '1') ? await webhookLoadRuns() : []
const tunings = wanted('tuning', process.env.BENCH_SKIP_TUNING === '1') ? await tuningRuns() : []
const targets = targetRows()
for (const row of targets) console.log(`target | ${row.what} | Kassa ${row.kassa} | floor (${row.floorName}) ${row.floor} | ratio ${row.ratio ?? '-'} | target ${row.target} | ${row.met === undefined ? '' : row.met ? 'met' : 'NOT met'}`)
const closedOn = on.find((figure) => figure.connections !== null)
const closedOff = off.find((figure) => figure.connections !== null)
/** The errors of a run and what they were (refusals, 429 `rate_limited`, are counted apart). */
function errorsCell(figure: LoadFigures): string {
  const kinds = Object.entries(figure.errorKinds)
  return kinds.length === 0 ? String(figure.errors) : `${figure.errors} (${kinds.map(([kind, count]) => `${count} ${kind}`).join(', ')})`
}
const ratio = closedOn && closedOff && closedOff.throughputPerSecond > 0 ? round2(closedOn.throughputPerSecond / closedOff.throughputPerSecond) : null

const markdown = [
  `# Payment authorization (${new Date().toISOString()})`,
  '',
  `Machine: ${navigator.hardwareConcurrency} cores shared by the server, Postgres and the load generator. ${ORGS} organizations x ${ACCOUNTS} accounts, ${DURATION_MS} ms per run after ${WARMUP_MS} ms warm-up. The server reaches Postgres over ${benchTransport()}.`,
  '',
  ...(floor === undefined
    ? []
    : [
        '## Floor: one durable commit of one row (the disk, not Kassa)',
        '',
        `${floor.commits} single-row autocommit inserts, one at a time, over ${benchTransport()}: p50 ${floor.p50Ms} ms, p90 ${floor.p90Ms} ms, p99 ${floor.p99Ms} ms, max ${floor.maxMs} ms. Every approval waits for at least one such flush.`,
        '',
        `The same load generator and pacing against servers that are not Kassa (bench/latency-floor.ts), at ${LATENCY_FLOOR_RATE}/s offered (and \`group\` at ${GROUP_FLOOR_RATE}/s when Kassa is offered that much): \`bare\` answers at once, \`commit\` after committing one row, \`group\` once a multi-row insert carrying it has committed, whenever none is in flight everything waiting going out as one. \`commit\` is what any server pays on this machine to make one request durable before answering it; \`group\` is the least a group commit does, with nothing else to do: the floor Kassa's targets are ratios to.`,
        '',
        ...latencyFloorTable(latencyFloors),
        '',
      ]),
  '## The targets beside their floors',
  '',
  'Each figure of Kassa beside the floor measured in this run by the same load generator (bench/latency-floor.ts), and their ratio.',
  '',
  '| figure | Kassa | floor | floor\'s figure | ratio | target | |',
  '|---|---|---|---|---|---|---|',
  ...targets.map((row) => `| ${row.what} | ${row.kassa} | ${row.floorName} | ${row.floor} | ${row.ratio === null ? '' : `${row.ratio}x`} | ${row.target} | ${row.met === undefined ? '' : row.met ? 'met' : '**not met**'} |`),
  '',
  ...(closedFloors.length === 0
    ? []
    : [
        `Floors in a closed loop, ${CONNECTIONS} connections:`,
        '',
        '| server | answered/s | p50 ms | p99 ms | max ms | server µs | Postgres µs | machine busy |',
        '|---|---|---|---|---|---|---|---|',
        ...closedFloors.map((floor) => `| ${floor.server} | ${floor.throughputPerSecond} | ${floor.p50Ms} | ${floor.p99Ms} | ${floor.maxMs} | ${floor.serverUs} | ${floor.postgresUs} | ${floor.machineBusyPercent}% |`),
        '',
      ]),
  ...(tunings.length === 0
    ? []
    : [
        '## Process tunings, with and without',
        '',
        'A server started as `npm start` starts it, and one with each tuning undone, each fresh on its own database, one after another in this run; ratios are to the first row (closed loop: higher is better; p99: lower is better).',
        '',
        '| server | start ms | closed loop /s | ratio | closed-loop p99 ms | 1000/s p99 ms | ratio | 1000/s max ms | server µs per answer at 1000/s |',
        '|---|---|---|---|---|---|---|---|---|',
        ...tunings.map((tuning) => `| ${tuning.variant} | ${tuning.startMs} | ${tuning.closed.throughputPerSecond} | ${round2(tuning.closed.throughputPerSecond / tunings[0]!.closed.throughputPerSecond)}x | ${tuning.closed.p99Ms} | ${tuning.at1000.p99Ms} | ${round2(tuning.at1000.p99Ms / tunings[0]!.at1000.p99Ms)}x | ${tuning.at1000.maxMs} | ${tuning.at1000.cpu.serverUs} |`),
        '',
      ]),
  '## In process (mitata)',
  '',
  '| step | avg | p99 |',
  '|---|---|---|',
  ...inProcessFigures.map((figure) => `| ${figure.name} | ${(figure.avgNs / 1000).toFixed(2)} µs | ${(figure.p99Ns / 1000).toFixed(2)} µs |`),
  '',
  '## HTTP, durable in Postgres before answering',
  '',
  'Latencies count from when each request was due (a request the load generator sent late carries its lateness); for open loops, "p99 from send" counts from when it was sent instead, which leaves the generator\'s own lateness out.',
  '',
  '| group commit | load | approved/s | p50 ms | p99 ms | p99 from send ms | max ms | p99/max ms by answer | answers > 500 ms | declined | refused 429 (of them shed) | errors (status and code) | operations per transaction |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...[...on, ...off].map((figure) => `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${figure.throughputPerSecond} | ${figure.p50Ms} | ${figure.p99Ms} | ${figure.p99FromSendMs ?? ''} | ${figure.maxMs} | ${byAnswerCell(figure)} | ${figure.overBudget} (${figure.approvedOverBudget} approved) | ${declinedCell(figure)} | ${figure.refused} (${figure.shed}) | ${errorsCell(figure)} | ${figure.operationsPerTransaction} |`),
  '',
  ratio === null ? '' : `Closed-loop throughput, group commit on / one transaction per request: **${ratio}x**.`,
  '',
  '### The writer: waiting for the batch ahead, then the commit',
  '',
  'Read from the server\'s histograms (`GET /ops/v1/ledger/stats`). Queued: from an operation entering the writer\'s queue to its batch being sent, which is the wait for the batch ahead of it to commit. Commit: from the server sending a batch to Postgres confirming it (the disk flush, and waiting behind the batches pipelined before it, included), counted once per batch. Durable: both together, counted once per operation, so a large, slow batch weighs as many times as it carries operations. An approval is durable after both, so a slow commit delays its own batch and every operation queued behind it.',
  '',
  '| group commit | load | operations sent | queued > 1 ms | queued > 3 ms | queued p99 at most ms | batches committed | commit > 3 ms | commit > 20 ms | commit p99 at most ms | durable > 3 ms | durable p50 at most ms | durable p99 at most ms |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...[...on, ...off].map((figure) => `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${figure.queued.count} | ${figure.queued.over1Ms} | ${figure.queued.over3Ms} | ${figure.queued.p99AtMostMs ?? '> 1000'} | ${figure.commits.count} | ${figure.commits.over3Ms} | ${figure.commits.over20Ms} | ${figure.commits.p99AtMostMs ?? '> 1000'} | ${figure.durable.over3Ms} | ${figure.durable.p50AtMostMs ?? '> 1000'} | ${figure.durable.p99AtMostMs ?? '> 1000'} |`),
  '',
  '### Postgres during each run',
  '',
  'Read from `pg_stat_bgwriter` and the WAL position, for the whole Postgres server. Postgres begins a checkpoint every `checkpoint_timeout` or every `max_wal_size` of WAL (this server\'s settings, not Kassa\'s); its writes and the final sync of the data files share the disk with the commits\' WAL flushes.',
  '',
  '| group commit | load | checkpoints begun | checkpoint syncs ms | WAL per answer KB |',
  '|---|---|---|---|---|',
  ...[...on, ...off].map((figure) => `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${figure.postgres.checkpoints} | ${figure.postgres.checkpointSyncMs} | ${figure.postgres.walKbPerAnswer} |`),
  '',
  '### In the server: from each authorization\'s arrival to its answer',
  '',
  'Read from the server\'s own latency histogram (`GET /ops/v1/payments/stats`): the time an authorization spent in the server, approved or declined, from before rate limiting and parsing to the answer. What the caller measured beyond this was spent in the kernel\'s queues (the server\'s loop busy or the process not running) and in the load generator.',
  '',
  '| group commit | load | answered | p50 at most ms | p99 at most ms | longer than 3 ms |',
  '|---|---|---|---|---|---|',
  ...[...on, ...off].map((figure) => `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${figure.served.count} | ${figure.served.p50AtMostMs ?? '> 1000'} | ${figure.served.p99AtMostMs ?? '> 1000'} | ${figure.served.over3Ms} |`),
  '',
  `### Where the answers over ${SLOW_MS} ms went`,
  '',
  `Open loops: every answer that came ${SLOW_MS} ms or more after its request was due, its time split by the load generator's own clock and the server's slow-authorization log (\`GET /ops/v1/payments/slow\`, this benchmark's servers keeping every authorization that spent ${SLOW_LOG_SERVER_MS} ms or more in the server, the newest ${SLOW_LOG_KEPT}), matched by payment id on the machine's one wall clock. Summed over those answers: sent late by the generator; before the server read the request (kernel queues, the server's loop busy or not running); in the server before the ledger writer had it, queued behind the batch ahead, its batch's commit (the statement, the disk flush and reading the reply), after the commit; declines' whole time in the server; and back to the generator (the server writing the answer, the kernel, the generator reading it). An answer the log does not have (it spent under ${SLOW_LOG_SERVER_MS} ms in the server, was refused, or was overwritten by newer ones past capacity) has only its lateness split off.`,
  '',
  `| group commit | load | answers over ${SLOW_MS} ms | in the server's log | sent late | before the server read it | before the writer | queued | commit | after the commit | declines in the server | back to the generator | not in the log |`,
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...[...on, ...off, ...webhooks]
    .filter((figure) => figure.slowAnswers !== undefined)
    .map((figure) => {
      const slow = figure.slowAnswers!
      return `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${slow.count} | ${slow.matched} | ${slow.ms.late} | ${slow.ms.toServer} | ${slow.ms.beforeWriter} | ${slow.ms.queued} | ${slow.ms.commit} | ${slow.ms.afterCommit} | ${slow.ms.declineInServer} | ${slow.ms.toGenerator} | ${slow.ms.notInLog} |`
    }),
  '',
  `### Where the answers over ${BUDGET_MS} ms went`,
  '',
  `The same split for the open loops' answers that came more than ${BUDGET_MS} ms after their request was due (the contract's hard budget), averaged per answer (ms), with the answers by kind: the log's state and failure code, or without a payment (a 429 or an error). Runs without any are left out.`,
  '',
  ...overBudgetTable([...on, ...off, ...webhooks]),
  '',
  '### Where the machine went (CPU per answer, read from /proc) and who was late',
  '',
  `The load generator (${CLIENT === 'fetch' ? 'fetch' : 'keep-alive client, bench/http-client.ts'}), the server process (and of it, its main thread: the rest is the JavaScript engine's compiler and collector threads; and its minor page faults) and every Postgres process, per answered request (with, of Postgres, its busiest single process, under load the ledger writer's one backend, whose time is serial: its µs per answer, its share of Postgres, and its µs per approval); how busy both cores were, and the rate that cost would allow with every core busy (a ceiling for this code on this machine, not a measured rate); the share of the run the generator's and the server's main threads, and all Postgres processes together, waited for a core while ready to run (the kernel's run-queue wait, /proc/<pid>/schedstat; Postgres' can pass 100% with several waiting at once); for open loops, the server's largest event-loop lag and how late the generator itself sent its most delayed request (both are inside the latencies above).`,
  '',
  '| group commit | load | generator µs | server µs | of which its main thread µs | server page faults | Postgres µs | of which its busiest process µs (share; per approval) | machine busy | every core busy: at most /s | CPU stolen by the host ms | waited for a core, % of the run: generator, server, Postgres | server loop lag max ms | generator late max ms |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...[...on, ...off].map((figure) => `| ${figure.groupCommit ? 'on' : 'off'} | ${figure.mode} | ${figure.cpu.generatorUs} | ${figure.cpu.serverUs} | ${figure.cpu.serverMainUs} | ${figure.cpu.serverFaultsPerAnswer} | ${figure.cpu.postgresUs} | ${figure.cpu.postgresBusiestUs} (${figure.cpu.postgresBusiestPercent}%; ${busiestPerApproval(figure)}) | ${figure.cpu.machineBusyPercent}% | ${figure.cpu.allCoresCeilingPerSecond} | ${figure.cpu.machineStolenMs} | ${figure.cpu.generatorMainWaitPercent}, ${figure.cpu.serverMainWaitPercent}, ${figure.cpu.postgresWaitPercent} | ${figure.serverLagMaxMs ?? ''} | ${figure.generatorLateMaxMs ?? ''} |`),
  '',
  `## With and without webhook load (${WEBHOOK_RATE}/s offered, group commit on)`,
  '',
  'With endpoints, each authorization is 10 deliveries, 10,000 a second, more than one instance delivers here, so they are a backlog, and the deliveries column is what the receivers took during the run. "Delivery in the server" is a second server with the worker on its request thread (`WEBHOOK_DELIVERY_PROCESS=false`); the others deliver from a process of their own at the lowest priority.',
  '',
  '| load | approved/s | p50 ms | p99 ms | max ms | answers > 500 ms | deliveries received |',
  '|---|---|---|---|---|---|---|',
  ...webhooks.map((figure) => `| ${figure.mode} | ${figure.throughputPerSecond} | ${figure.p50Ms} | ${figure.p99Ms} | ${figure.maxMs} | ${figure.overBudget} | ${figure.deliveriesReceived ?? ''} |`),
  '',
  '## Database cut off (1000/s offered through a TCP proxy, 3 s per phase)',
  '',
  '| phase | approved | declined | refused 429 | errors | p99 ms | max ms | answers > 500 ms |',
  '|---|---|---|---|---|---|---|---|',
  ...outage.map((figure) => `| ${figure.phase} | ${figure.approved} | ${figure.declined} | ${figure.refused} | ${figure.errors} | ${figure.p99Ms} | ${figure.maxMs} | ${figure.overBudget} |`),
  '',
].join('\n')
console.log(`\n${markdown}`)
const path = writeResults('authorize', { at: new Date().toISOString(), transport: benchTransport(), commitFloor: floor, latencyFloors, inProcess: inProcessFigures, http: { groupCommitOn: on, groupCommitOff: off, ratio }, closedFloors, targets, tunings, outage, webhooks }, markdown)
console.log(`results written to ${path}`)
await closePostgresActivity()
