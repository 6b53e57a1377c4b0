import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { PaymentRow } from './write-sets.ts'
import { Deadlines } from '../../lib/deadlines.ts'
import { ApiError } from '../../lib/errors.ts'
import { LatencyHistogram, roundTo, type HistogramSnapshot } from '../../lib/histogram.ts'
import { SlowLog } from '../../lib/slow-log.ts'
import { StandingQueue } from '../../lib/standing-queue.ts'
import type { IdempotencyStore, InlineIdempotency } from '../../platform/idempotency.ts'
import type { LoadShedder } from '../../platform/load-shedder.ts'
import type { Clock } from '../clock/clock.ts'
import type { HoldRecords } from '../holds/state.ts'
import * as repo from './repo.ts'
import { SLOW_AUTHORIZATION_CODEC, type AuthorizationTrace, type SlowAuthorization } from './slow.ts'

/*
 * The payments module's settings and its per-instance state (`PaymentsCore`), which the factory
 * makes once and every payments function is handed: no state lives at module level.
 */

/** The contract's hard budget: an authorization is answered within it, approved only if durable. */
export const AUTHORIZATION_BUDGET_MS = 500
/**
 * The decision is due this long before the budget ends: the rest is for what happens outside the
 * handler (the request waiting to be read, the answer being written) on a loaded machine, so the
 * caller has the answer within the budget, not just the handler. At 10,000/s offered the server's
 * loop ran up to 74 ms late and the caller read its answers up to 35 ms late in one run, and the
 * slowest answer took 490 ms with 100 ms here; with 150 ms, 373 and 388 ms in the next two runs.
 */
export const AUTHORIZATION_ANSWER_MARGIN_MS = 150
/**
 * The contract's p99 for an authorization's answer. Past capacity (a standing queue at the ledger
 * writer, not a burst) an authorization is admitted only if it would commit within this less the
 * answer margin; the rest are declined at once. Without it the queue settled at the hard budget
 * and approvals took 300 to 450 ms past capacity.
 */
export const AUTHORIZATION_P99_MS = 300
/** How long the writer's queue must stay above its target before it counts as standing (CoDel's interval). */
const ADMISSION_INTERVAL_MS = 100
/**
 * A decline without an Idempotency-Key waits for its record only while the records keep up: at
 * most this long for its own, and not at all once the oldest decline still waiting has waited
 * longer than this; it is then answered and recorded behind (see `decline`).
 */
export const DECLINE_RECORD_LAG_MAX_MS = 50
/**
 * The `Retry-After` of an authorization refused past capacity (shed, or its decline could not be
 * recorded): the shedder's share falls from all to none within a second of the loop catching up.
 */
const OVERLOADED_RETRY_AFTER_SECONDS = 1

/**
 * An authorization refused past this instance's capacity: 429 `rate_limited` with `Retry-After`,
 * nothing of it authorized or recorded, so it can be sent again as it was.
 */
export function overloadedRefusal(why: string): ApiError {
  return new ApiError('rate_limited', `This instance is past its capacity: ${why}. Nothing was authorized or recorded; retry after ${OVERLOADED_RETRY_AFTER_SECONDS} s`, {
    headers: { 'retry-after': String(OVERLOADED_RETRY_AFTER_SECONDS) },
  })
}
/** An uncaptured authorization lapses after this long on the organization's clock. */
export const AUTHORIZATION_LIFETIME_MS = 24 * 3600 * 1000

/** What payments read and move, given by the module's factory. */
export interface PaymentsCoreDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  /** The holds' records: a payment's capture or void takes its pending hold through them. */
  holds: HoldRecords
  /**
   * The load shedder in force, undefined when shedding is off: read at each use, so the shedder
   * that sheds is the one counted (tests put in a shedder of their own).
   */
  shedder: () => LoadShedder | undefined
  config: { slowAuthorizationMs: number; slowAuthorizationsKept: number }
}

/**
 * What every payments function works on: its dependencies and this instance's state, made once by
 * the module's factory (`createPaymentsCore`) and passed explicitly.
 */
export interface PaymentsCore extends Omit<PaymentsCoreDeps, 'config'> {
  /** The authorizations' deadlines: their budgets and the shorter waits inside them (see `Budget`). */
  deadlines: Deadlines
  budgetMs: number
  /** Declines already answered whose record is not durable yet (the database is slow or down). */
  unsettled: Map<string, PaymentRow>
  /**
   * Answers given as declines whose saved idempotent answer still says otherwise: a late
   * authorization landed with its record, and the commit that closes it (and rewrites the record)
   * has not landed yet. Keyed by org and Idempotency-Key; a retry in that window replays these.
   */
  answersInFlight: Map<string, { requestHash: string; body: string }>
  declines: repo.DeclineRecorder
  /** Whether the writer's queue is standing (past capacity) rather than a burst: admission then holds it to its target. */
  writerQueue: StandingQueue
  /** From each authorization's arrival to its answer (approved or declined), as this instance saw it. */
  answerLatency: LatencyHistogram
  /** The latest authorizations slower than `SLOW_AUTHORIZATION_MS`, with where their time went. */
  slow: SlowLog<SlowAuthorization>
  /** Authorizations refused (429) because no further decline could be recorded. */
  refusedUnrecordable: number
  /** Set at shutdown: background retries stop. */
  stopped: boolean
}

/** What the authorize route knows beyond the body. */
export interface AuthorizeContext {
  /** `performance.now()` when the request arrived: the budget counts from here. */
  receivedAt: number
  /** Present when the request carries an Idempotency-Key; its record goes into the same commit. */
  idempotency?: InlineIdempotency
  records: IdempotencyStore
  /** Filled in as the authorization is decided, for the slow-authorization log (`authorizePayment` makes it). */
  trace?: AuthorizationTrace
}

/** An answer is the payment view as JSON text: the same text is the saved idempotent answer, serialized once. */
export type AuthorizeAnswer = { kind: 'answer'; body: string } | { kind: 'replay'; status: number; body: string }

export const inFlightId = (orgId: string, key: string) => `${orgId}\n${key}`

export function createPaymentsCore(deps: PaymentsCoreDeps): PaymentsCore {
  return {
    db: deps.db,
    ledger: deps.ledger,
    clock: deps.clock,
    holds: deps.holds,
    shedder: deps.shedder,
    deadlines: new Deadlines(),
    budgetMs: AUTHORIZATION_BUDGET_MS,
    unsettled: new Map(),
    answersInFlight: new Map(),
    declines: new repo.DeclineRecorder(deps.db),
    writerQueue: new StandingQueue(AUTHORIZATION_P99_MS - AUTHORIZATION_ANSWER_MARGIN_MS, ADMISSION_INTERVAL_MS),
    answerLatency: new LatencyHistogram(),
    slow: new SlowLog<SlowAuthorization>(deps.config.slowAuthorizationMs, deps.config.slowAuthorizationsKept, SLOW_AUTHORIZATION_CODEC),
    refusedUnrecordable: 0,
    stopped: false,
  }
}

/** Tests shorten or lengthen the budget, or lower the declines memory may keep waiting; production keeps the contract's 500 ms and `DECLINE_BACKLOG_MAX`. */
export function configurePayments(state: PaymentsCore, options: { budgetMs?: number; declineBacklogMax?: number }): void {
  if (options.budgetMs !== undefined) state.budgetMs = options.budgetMs
  if (options.declineBacklogMax !== undefined) state.declines.backlogMax = options.declineBacklogMax
}

/**
 * How long this instance took to answer authorizations, from arrival (before rate limiting and
 * parsing) to the decision: what a caller's latency is made of besides the network, the kernel's
 * queues and the caller's own delays. Refusals of malformed input (400, 404) are not counted. And
 * how far decline records are behind the answers.
 */
export function paymentsStats(state: PaymentsCore): {
  answerLatencyMs: HistogramSnapshot
  declineRecords: { waiting: number; oldestWaitMs: number; refused: number }
  shedding: { enabled: boolean; share: number; shed: number; shedOverdue: number; stalls: number }
} {
  const shedder = state.shedder()
  return {
    answerLatencyMs: state.answerLatency.snapshot(),
    declineRecords: { waiting: state.declines.backlog, oldestWaitMs: roundTo(state.declines.oldestWaitMs(), 2), refused: state.refusedUnrecordable },
    shedding: { enabled: shedder !== undefined, share: roundTo(shedder?.currentShare ?? 0, 2), shed: shedder?.shed ?? 0, shedOverdue: shedder?.shedOverdue ?? 0, stalls: shedder?.stalls ?? 0 },
  }
}
