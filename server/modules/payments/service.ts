import { eventRow } from '../../ledger/events.ts'
import { SYSTEM_ACCOUNTS, deltasOf, type Posting } from '../../ledger/hot-balances.ts'
import type { AccountEntry } from '../../ledger/accounts.ts'
import { newPendingHold, type PendingHold } from '../../ledger/ledger.ts'
import { CommitFailedError, IdempotencyKeyTaken, OperationWithdrawn, type BatchTiming, type IdempotencyAnswer, type LedgerOperation, type PaymentRow } from '../../ledger/writer.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { logFailure } from '../../lib/log.ts'
import { hexWord, newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { answerInCommit, inlineRecord, judgeExisting, type IdempotencyRow, type IdempotencyStore, type InlineIdempotency } from '../../platform/idempotency.ts'
import type { Runtime } from '../../runtime.ts'
import { findAsset, type AssetInfo } from '../../lib/assets.ts'
import { holdRow, onHoldExpiry } from '../holds/service.ts'
import type { HoldRecord } from '../holds/repo.ts'
import { closingHooks, holdRowsToWrite, onOwnedHoldLookup, ownedHoldId, ownerOfHoldId, releasePostings, takePendingHold } from '../holds/state.ts'
import { assertWithinLimits } from '../transfers/fees.ts'
import { FAILURE_CODES, type AuthorizePaymentInput, type CapturePaymentInput, type FailureCode, type PaymentState, type PaymentView } from './model.ts'
import * as repo from './repo.ts'
import { isoOf } from '../../lib/time.ts'
import { StandingQueue } from '../../lib/standing-queue.ts'
import { LatencyHistogram, roundTo, type HistogramSnapshot } from '../../lib/histogram.ts'
import { SlowLog, type SlowLogCodec } from '../../lib/slow-log.ts'
import { assert } from '../../lib/assert.ts'
import { Deadlines, type Deadline } from '../../lib/deadlines.ts'

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
/** Amounts of unsupported assets are still checked for shape; no asset has more decimals than this. */
const UNKNOWN_ASSET_DECIMALS_MAX = 36

/**
 * Ledger refusals that are business declines. A decline's failureCode is the refusal's own code
 * from the contract's error vocabulary, so one reason reads the same on a payment as on a transfer
 * or a hold.
 */
const DECLINE_CODES: Partial<Record<string, FailureCode>> = {
  insufficient_available: 'insufficient_available',
  account_frozen: 'account_frozen',
  min_amount: 'min_amount',
  limit_exceeded: 'limit_exceeded',
  unsupported_asset: 'unsupported_asset',
}

interface PaymentsState {
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

/** What is known of one authorization when it is answered, beyond its latency. */
interface AuthorizationTrace {
  paymentId: string | null
  failureCode: FailureCode | null
  /** Its commit, for an approval the writer committed: the batch's times, and when it was queued. */
  batch: BatchTiming | undefined
  queuedAt: number
}

/**
 * One authorization slower than the threshold, as `GET /ops/v1/payments/slow` gives it. Times are
 * milliseconds; `arrivedAtMs` is wall-clock (Unix epoch, fractional), so a caller can set it beside
 * its own clock on the same machine.
 */
export interface SlowAuthorization {
  paymentId: string | null
  state: 'authorized' | 'declined' | 'replayed'
  failureCode: FailureCode | null
  arrivedAtMs: number
  totalMs: number
  /** For an approval committed by the writer: where its time went, adding up to `totalMs`; null otherwise. */
  phases: { beforeWriterMs: number; queuedMs: number; commitMs: number; afterCommitMs: number } | null
  /** Operations in its batch, and batches in flight ahead of that batch when it was sent. */
  batchOperations: number | null
  batchesAhead: number | null
}

/** An answer is the payment view as JSON text: the same text is the saved idempotent answer, serialized once. */
export type AuthorizeAnswer = { kind: 'answer'; body: string } | { kind: 'replay'; status: number; body: string }

const inFlightId = (orgId: string, key: string) => `${orgId}\n${key}`

const states = new WeakMap<Runtime, PaymentsState>()

function stateOf(runtime: Runtime): PaymentsState {
  let state = states.get(runtime)
  if (!state) {
    state = {
      budgetMs: AUTHORIZATION_BUDGET_MS,
      unsettled: new Map(),
      answersInFlight: new Map(),
      declines: new repo.DeclineRecorder(runtime.db),
      writerQueue: new StandingQueue(AUTHORIZATION_P99_MS - AUTHORIZATION_ANSWER_MARGIN_MS, ADMISSION_INTERVAL_MS),
      answerLatency: new LatencyHistogram(),
      slow: new SlowLog<SlowAuthorization>(runtime.config.slowAuthorizationMs, runtime.config.slowAuthorizationsKept, SLOW_AUTHORIZATION_CODEC),
      refusedUnrecordable: 0,
      stopped: false,
    }
    states.set(runtime, state)
  }
  return state
}

/** Tests shorten or lengthen the budget, or lower the declines memory may keep waiting; production keeps the contract's 500 ms and `DECLINE_BACKLOG_MAX`. */
export function configurePayments(runtime: Runtime, options: { budgetMs?: number; declineBacklogMax?: number }): void {
  const state = stateOf(runtime)
  if (options.budgetMs !== undefined) state.budgetMs = options.budgetMs
  if (options.declineBacklogMax !== undefined) state.declines.backlogMax = options.declineBacklogMax
}

/**
 * Marks the pending holds of authorized payments as owned by them, and joins the hold sweeper so a
 * lapse expires the payment in the same commit as its hold. Runs before the sweeper starts.
 *
 * Memory keeps an authorized payment only as its pending hold (`ownerId` names the payment): capture
 * and void read the payment's row anyway, to answer for any state, and the sweeper reads the rows
 * of the payments it expires, a thousand at most in one query. An uncaptured authorization stays
 * in memory for up to 24 h, and every object it keeps there is one more for the garbage collector
 * to trace (see `bench/authorize-memory.ts`).
 */
export async function startPayments(runtime: Runtime): Promise<void> {
  const state = stateOf(runtime)
  runtime.stoppers.unshift(async () => {
    state.stopped = true
    await state.declines.stop()
  })
  for (const payment of await repo.authorizedPaymentHolds(runtime.db)) {
    if (payment.holdId === null) continue
    // A hold made before payments recorded their own holds has its row, loaded with the rest.
    if (runtime.ledger.holds.assignOwner(payment.holdId, payment.id)) continue
    if (payment.holdId !== ownedHoldId(payment.id) || payment.amount === null || payment.expiresAt === null) continue
    runtime.ledger.holds.load({
      id: payment.holdId,
      orgId: payment.orgId,
      accountId: payment.accountId,
      asset: payment.asset,
      amountMinor: payment.amount,
      expiresAtMs: payment.expiresAt.getTime(),
      createdAtMs: payment.createdAt.getTime(),
      ownerId: payment.id,
      ownerDurable: true,
    })
  }
  onOwnedHoldLookup(runtime, (orgId, holdId) => paymentHold(runtime, orgId, holdId))
  onHoldExpiry(runtime, async (holds) => {
    const rows = await repo.authorizedPaymentsByKeys(runtime.db, holds.map((hold) => ({ orgId: hold.orgId, id: hold.ownerId! })))
    const byId = new Map(rows.map((row) => [row.id, row]))
    const externalIds = new Map<string, string | null>()
    for (const row of rows) if (!externalIds.has(row.accountId)) externalIds.set(row.accountId, (await runtime.ledger.accounts.find(row.accountId))?.externalId ?? null)
    return (hold, operation, now) => {
      const payment = byId.get(hold.ownerId!)
      if (payment === undefined || payment.holdId !== hold.id) {
        // Its authorization is still on its way to Postgres (only a clock moved a day ahead gets
        // here first): the hold waits for it.
        if (!hold.ownerDurable) return false
        // Never expected: the hold lapses alone rather than staying pending for ever, and then
        // needs a row of its own to say so (its payment's row no longer records it).
        logFailure('payments.expiry', `payments: hold ${hold.id} lapsed but its payment ${hold.ownerId} is not authorized in the database; the hold expires alone`)
        operation.holds = [holdRow(hold, 'expired', now)]
        return true
      }
      const lapsed: PaymentRow = { ...payment, state: 'lapsed', closedAt: now }
      operation.payments = [...(operation.payments ?? []), lapsed]
      operation.events!.push(eventRow(hold.orgId, 'payment.expired', eventData(lapsed, externalIds.get(payment.accountId) ?? null), now))
      return true
    }
  })
}

/** What a payment's row says of the hold it records, by the payment's state. */
const HOLD_STATE_OF_PAYMENT: Record<PaymentRow['state'], HoldRecord['state']> = {
  authorized: 'pending',
  captured: 'captured',
  voided: 'released',
  lapsed: 'expired',
  // Declined with a hold: a fail-closed decline whose late authorization landed and was released.
  declined: 'released',
}

/** The hold a payment's row records (see `ownedHoldId`), as a row of `holds` would say it. */
async function paymentHold(runtime: Runtime, orgId: string, holdId: string): Promise<HoldRecord | undefined> {
  const paymentId = ownerOfHoldId(holdId, 'pay')
  if (paymentId === undefined) return undefined
  const payment = await repo.findPayment(runtime.db, orgId, paymentId)
  if (payment === undefined || payment.holdId !== holdId || payment.amount === null || payment.expiresAt === null) return undefined
  const state = HOLD_STATE_OF_PAYMENT[payment.state]
  return {
    id: holdId,
    orgId: payment.orgId,
    accountId: payment.accountId,
    asset: payment.asset,
    amount: payment.amount,
    state,
    expiresAt: payment.expiresAt,
    capturedAmount: state === 'captured' ? payment.capturedAmount : null,
    transferId: null,
    createdAt: payment.createdAt,
    closedAt: state === 'pending' ? null : payment.closedAt,
  }
}

export function toPaymentView(row: PaymentRow): PaymentView {
  const decimals = findAsset(row.asset)?.decimals
  const format = (value: bigint | null | undefined) => (value == null || decimals === undefined ? null : formatAmount(value, decimals))
  return {
    id: row.id,
    state: row.state,
    failureCode: (row.failureCode ?? null) as PaymentView['failureCode'],
    accountId: row.accountId,
    asset: row.asset,
    amount: format(row.amount) ?? row.requestedAmount,
    capturedAmount: format(row.capturedAmount),
    holdId: row.holdId ?? null,
    merchant: row.merchantName ? { name: row.merchantName, mcc: row.merchantMcc ?? null } : null,
    description: row.description ?? null,
    expiresAt: row.expiresAt ? isoOf(row.expiresAt) : null,
    createdAt: isoOf(row.createdAt),
    closedAt: row.closedAt ? isoOf(row.closedAt) : null,
  }
}

/** The amount as the view shows it: formatted in the asset's decimals, or as requested for an unknown asset. */
function amountOf(row: PaymentRow): string {
  const decimals = findAsset(row.asset)?.decimals
  return row.amount == null || decimals === undefined ? row.requestedAmount : formatAmount(row.amount, decimals)
}

function eventData(row: PaymentRow, externalId: string | null, extra: Record<string, unknown> = {}, amount: string = amountOf(row)): Record<string, unknown> {
  return { paymentId: row.id, accountId: row.accountId, externalId, amount, asset: row.asset, ...extra }
}

type BudgetOutcome<T> = { kind: 'done'; value: T } | { kind: 'failed'; error: unknown } | { kind: 'timeout' }

const TIMED_OUT = { kind: 'timeout' } as const
const done = <T>(value: T) => ({ kind: 'done' as const, value })
const failed = (error: unknown) => ({ kind: 'failed' as const, error })

/**
 * The authorizations' deadlines: their budgets, and the shorter waits raced inside them. They fire
 * from the request path too (`fireDueDeadlines`, called by the front for every authorization it
 * reads), not only from a timer: past capacity a turn of Bun's event loop can read requests for
 * seconds without running a timer, and a budget ended by its timer alone was answered that late
 * (see `Deadlines`).
 */
const deadlines = new Deadlines()

/** Ends every authorization budget (and shorter wait) that is due; cheap when none is. */
export function fireDueDeadlines(): void {
  deadlines.fireDue()
}

/**
 * An authorization's remaining time. Every step it waits for (the account lookup, the commit, a
 * decline's record) races the same deadline, armed once per request and cancelled by `end`,
 * instead of a timer and a promise per step.
 */
class Budget {
  private expiry: Promise<typeof TIMED_OUT> | undefined
  private armed: Deadline | undefined
  private expired = false

  constructor(readonly deadline: number) {}

  /** Resolves to what the promise gave, or to `timeout` if the budget's remaining time runs out first. */
  race<T>(promise: Promise<T>): Promise<BudgetOutcome<T>> {
    const remainingMs = this.deadline - performance.now()
    // A step that starts with no time left still gets one turn of the event loop to finish, as the
    // budget always gave it: it races a deadline of its own, due at once.
    if (remainingMs <= 0 || this.expired) return raceDeadline(promise, Math.max(0, remainingMs))
    this.expiry ??= new Promise((resolve) => {
      this.armed = deadlines.arm(this.deadline, () => {
        this.expired = true
        resolve(TIMED_OUT)
      })
    })
    return Promise.race([promise.then(done, failed), this.expiry])
  }

  /** As `race`, giving the step at most `maxMs` of the time left. */
  raceFor<T>(promise: Promise<T>, maxMs: number): Promise<BudgetOutcome<T>> {
    return maxMs < this.deadline - performance.now() ? raceDeadline(promise, maxMs) : this.race(promise)
  }

  /** Whether no time is left: a step raced now gets only one more turn of the event loop. */
  spent(): boolean {
    return this.expired || this.deadline <= performance.now()
  }

  end(): void {
    if (this.armed !== undefined) deadlines.cancel(this.armed)
  }
}

/** `promise` raced against a deadline `delayMs` from now. */
async function raceDeadline<T>(promise: Promise<T>, delayMs: number): Promise<BudgetOutcome<T>> {
  let armed: Deadline | undefined
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    armed = deadlines.arm(performance.now() + delayMs, () => resolve(TIMED_OUT))
  })
  try {
    return await Promise.race([promise.then(done, failed), timeout])
  } finally {
    deadlines.cancel(armed!)
  }
}

/**
 * Decides synchronously and answers inside the budget, counted from the request's arrival.
 * Approved: the amount is held on the account through the ledger and the answer waits for the
 * commit, which also holds the idempotency record. Declined: 201 with a failure code. If the commit
 * is not durable within the budget, the answer is a `processing_timeout` decline and the hold is
 * made uncapturable at once; when the late write lands it is released (see `failClosed`).
 */
export async function authorizePayment(runtime: Runtime, orgId: string, input: AuthorizePaymentInput, context: AuthorizeContext): Promise<AuthorizeAnswer> {
  const state = stateOf(runtime)
  const budget = new Budget(context.receivedAt + state.budgetMs - Math.min(AUTHORIZATION_ANSWER_MARGIN_MS, state.budgetMs / 2))
  const trace: AuthorizationTrace = { paymentId: null, failureCode: null, batch: undefined, queuedAt: 0 }
  try {
    const answer = await authorizeWithin(runtime, orgId, input, { ...context, trace }, budget)
    const answeredAt = performance.now()
    const tookMs = answeredAt - context.receivedAt
    state.answerLatency.record(tookMs)
    if (state.slow.isSlow(tookMs)) state.slow.add(slowEntry(trace, answer, context.receivedAt, answeredAt))
    return answer
  } finally {
    budget.end()
  }
}

/**
 * How long this instance took to answer authorizations, from arrival (before rate limiting and
 * parsing) to the decision: what a caller's latency is made of besides the network, the kernel's
 * queues and the caller's own delays. Refusals of malformed input (400, 404) are not counted. And
 * how far decline records are behind the answers.
 */
export function paymentsStats(runtime: Runtime): {
  answerLatencyMs: HistogramSnapshot
  declineRecords: { waiting: number; oldestWaitMs: number; refused: number }
  shedding: { enabled: boolean; share: number; shed: number; shedOverdue: number; stalls: number }
} {
  const state = stateOf(runtime)
  const shedder = runtime.shedder
  return {
    answerLatencyMs: state.answerLatency.snapshot(),
    declineRecords: { waiting: state.declines.backlog, oldestWaitMs: roundTo(state.declines.oldestWaitMs(), 2), refused: state.refusedUnrecordable },
    shedding: { enabled: shedder !== undefined, share: roundTo(shedder?.currentShare ?? 0, 2), shed: shedder?.shed ?? 0, shedOverdue: shedder?.shedOverdue ?? 0, stalls: shedder?.stalls ?? 0 },
  }
}

const SLOW_STATES = ['authorized', 'declined', 'replayed'] as const

/**
 * A slow authorization as 14 numbers (see `SlowLogCodec`): its payment's id as the four 32-bit words
 * of its UUID, its state and failure code by their place in their lists, and its times and batch;
 * NaN for null. A payment's id is always `pay_` and 32 hex digits (`newId`).
 */
const SLOW_AUTHORIZATION_CODEC: SlowLogCodec<SlowAuthorization> = {
  width: 14,
  write(entry, into, at) {
    const id = entry.paymentId
    assert(id === null || (id.length === 36 && id.startsWith('pay_')), `a payment id of our form, not ${id}`)
    for (let word = 0; word < 4; word++) {
      const value = id === null ? Number.NaN : hexWord(id, 4 + word * 8)
      assert(value !== -1, `a payment id of our form, not ${id}`)
      into[at + word] = value
    }
    into[at + 4] = SLOW_STATES.indexOf(entry.state)
    into[at + 5] = entry.failureCode === null ? Number.NaN : FAILURE_CODES.indexOf(entry.failureCode)
    into[at + 6] = entry.arrivedAtMs
    into[at + 7] = entry.totalMs
    const phases = entry.phases
    into[at + 8] = phases === null ? Number.NaN : phases.beforeWriterMs
    into[at + 9] = phases === null ? Number.NaN : phases.queuedMs
    into[at + 10] = phases === null ? Number.NaN : phases.commitMs
    into[at + 11] = phases === null ? Number.NaN : phases.afterCommitMs
    into[at + 12] = entry.batchOperations ?? Number.NaN
    into[at + 13] = entry.batchesAhead ?? Number.NaN
  },
  read(from, at) {
    const nullable = (value: number) => (Number.isNaN(value) ? null : value)
    let paymentId: string | null = null
    if (!Number.isNaN(from[at]!)) {
      paymentId = 'pay_'
      for (let word = 0; word < 4; word++) paymentId += from[at + word]!.toString(16).padStart(8, '0')
    }
    return {
      paymentId,
      state: SLOW_STATES[from[at + 4]!]!,
      failureCode: Number.isNaN(from[at + 5]!) ? null : FAILURE_CODES[from[at + 5]!]!,
      arrivedAtMs: from[at + 6]!,
      totalMs: from[at + 7]!,
      phases: Number.isNaN(from[at + 8]!) ? null : { beforeWriterMs: from[at + 8]!, queuedMs: from[at + 9]!, commitMs: from[at + 10]!, afterCommitMs: from[at + 11]! },
      batchOperations: nullable(from[at + 12]!),
      batchesAhead: nullable(from[at + 13]!),
    }
  },
}

function slowEntry(trace: AuthorizationTrace, answer: AuthorizeAnswer, receivedAt: number, answeredAt: number): SlowAuthorization {
  const batch = trace.batch
  const round = (ms: number) => roundTo(ms, 3)
  return {
    paymentId: answer.kind === 'replay' ? null : trace.paymentId,
    state: answer.kind === 'replay' ? 'replayed' : trace.failureCode === null ? 'authorized' : 'declined',
    failureCode: answer.kind === 'replay' ? null : trace.failureCode,
    arrivedAtMs: round(performance.timeOrigin + receivedAt),
    totalMs: round(answeredAt - receivedAt),
    phases:
      batch === undefined || answer.kind === 'replay' || trace.failureCode !== null
        ? null
        : {
            beforeWriterMs: round(trace.queuedAt - receivedAt),
            queuedMs: round(batch.sentAt - trace.queuedAt),
            commitMs: round(batch.committedAt - batch.sentAt),
            afterCommitMs: round(answeredAt - batch.committedAt),
          },
    batchOperations: batch?.operations ?? null,
    batchesAhead: batch?.behind ?? null,
  }
}

/** A page of the slow-authorization log: 100 entries when `limit` is left out, at most 1,000. */
export const SLOW_PAGE_DEFAULT = 100
export const SLOW_PAGE_MAX = 1000

/**
 * A page of this instance's authorizations slower than `SLOW_AUTHORIZATION_MS` (from arrival to
 * answer), oldest first, each numbered in the order they were recorded (`seq`, from 1), with where
 * each approval's time went: before the ledger writer had it (rate limiting, authentication,
 * parsing, the decision), waiting in its queue for the batch ahead, its batch's commit, and after
 * the commit until answered. Those after `after` (a `seq`; the last one of a page reads the next),
 * or without it the newest. A page, never the whole log: the server's one thread builds the answer,
 * and the log read whole (the benchmark's 131,072 entries) held it for up to 633 ms, longer than an
 * authorization's budget.
 */
export function slowAuthorizations(
  runtime: Runtime,
  query: { after?: number; limit?: number },
): { thresholdMs: number; recorded: number; kept: number; missed: number; hasMore: boolean; authorizations: Array<SlowAuthorization & { seq: number }> } {
  const log = stateOf(runtime).slow
  const limit = pageLimit(query.limit, { fallback: SLOW_PAGE_DEFAULT, max: SLOW_PAGE_MAX })
  const after = query.after
  if (after !== undefined && (!Number.isSafeInteger(after) || after < 0 || after > log.recorded)) {
    throw invalid('after', `after must be a whole number from 0 to ${log.recorded}, the slow authorizations this instance has recorded since it started`)
  }
  const page = log.page(after, limit)
  return {
    thresholdMs: log.thresholdMs,
    recorded: log.recorded,
    kept: log.recorded - log.oldestKept + 1,
    missed: page.missed,
    hasMore: page.hasMore,
    authorizations: page.entries.map(({ seq, entry }) => ({ seq, ...entry })),
  }
}

/** The instance's decline recorder (for tests that hold its writes back). */
export function declineRecorderOf(runtime: Runtime): repo.DeclineRecorder {
  return stateOf(runtime).declines
}

async function authorizeWithin(runtime: Runtime, orgId: string, input: AuthorizePaymentInput, context: AuthorizeContext, budget: Budget): Promise<AuthorizeAnswer> {
  const state = stateOf(runtime)
  // The key was answered already and its record is not durable yet: that answer is replayed.
  if (context.idempotency && state.answersInFlight.has(inFlightId(orgId, context.idempotency.key))) return replayTakenKey(runtime, orgId, context, budget)
  const info = findAsset(input.asset)
  const amountMinor = info ? parseAmount(input.amount, info.decimals, 'amount') : (parseAmount(input.amount, UNKNOWN_ASSET_DECIMALS_MAX, 'amount'), null)
  // A known account is read from memory in this step: no promise, no race, no turn of the loop.
  const known = runtime.ledger.accounts.cached(orgId, input.accountId, 'accountId')
  const lookup = known !== undefined ? done(known) : await budget.race(runtime.ledger.accounts.require(orgId, input.accountId, 'accountId'))
  if (lookup.kind === 'failed') throw lookup.error
  const now = runtime.clock.now(orgId)
  const row = newPaymentRow(orgId, input, info, amountMinor, now)
  if (context.trace) context.trace.paymentId = row.id
  if (lookup.kind === 'timeout') return decline(runtime, row, 'processing_timeout', null, budget, context)
  const account = lookup.value
  if (!info || amountMinor === null) return decline(runtime, row, 'unsupported_asset', account.externalId, budget, context)
  let submitted: { operation: LedgerOperation; hold: PendingHold; commit: Promise<void>; body: string }
  try {
    assertWithinLimits(amountMinor, runtime.ledger.policy(info.asset), info.decimals)
    if (account.status === 'frozen') throw new ApiError('account_frozen', 'frozen')
    // Admission: when the writer's queue is already longer than the budget left, the approval could
    // not be durable in time; declining now keeps the writer approving at its capacity. A standing
    // queue (past capacity) is held to its target, so admitted approvals still answer within the
    // contract's p99 rather than at the end of the budget.
    const waitMs = runtime.ledger.writer.expectedWaitMs()
    const decidedAt = performance.now()
    const remainingMs = budget.deadline - decidedAt
    if (waitMs > (state.writerQueue.observe(waitMs, decidedAt) ? Math.min(remainingMs, state.writerQueue.targetMs) : remainingMs)) {
      return decline(runtime, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, budget, context)
    }
    submitted = reserve(runtime, row, info, amountMinor, account, now, context, budget.deadline)
  } catch (error) {
    const code = error instanceof ApiError ? DECLINE_CODES[error.code] : undefined
    if (code === undefined) throw error
    return decline(runtime, row, code, account.externalId, budget, context)
  }
  const outcome = await budget.race(submitted.commit)
  if (outcome.kind === 'done') {
    if (performance.now() <= budget.deadline) return { kind: 'answer', body: submitted.body }
    // Durable, but seen only after the decision was due: the thread ran late (past capacity), and
    // the commit's reply was handled before the budget's timer had its turn. Answered as the timer
    // would have answered, a fail-closed decline, with the write that landed released: an approval
    // is never given after its deadline, when a caller may have stopped waiting for it.
    return { kind: 'answer', body: failClosed(runtime, submitted.hold, submitted.commit, row, account.externalId, context) }
  }
  if (outcome.kind === 'failed') {
    if (outcome.error instanceof IdempotencyKeyTaken) return replayTakenKey(runtime, orgId, context, budget)
    // Withdrawn by the writer because it could not have committed before the deadline: nothing was applied.
    if (outcome.error instanceof OperationWithdrawn) return decline(runtime, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, budget, context)
    // The writer undid the reservation, but a commit whose reply was lost with the connection may
    // have landed all the same: settled like a late write (see `failClosed`).
    logFailure('payments.commit', `payments: authorization ${row.id} could not commit; declined`, outcome.error)
    return { kind: 'answer', body: failClosed(runtime, submitted.hold, submitted.commit, row, account.externalId, context, 'processing_error') }
  }
  // Still waiting for the writer (the database is slow or down): taken back, it will never be
  // written, and only the decline is recorded.
  if (runtime.ledger.withdraw(submitted.operation)) return decline(runtime, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, budget, context)
  return { kind: 'answer', body: failClosed(runtime, submitted.hold, submitted.commit, row, account.externalId, context) }
}

/** An authorization's payment as requested, before it is decided (state `authorized`, nothing held yet). */
function newPaymentRow(orgId: string, input: AuthorizePaymentInput, info: AssetInfo | undefined, amountMinor: bigint | null, now: Date): PaymentRow {
  return {
    id: newId('pay'),
    orgId,
    accountId: input.accountId,
    asset: info?.asset ?? input.asset,
    amount: amountMinor,
    requestedAmount: input.amount,
    state: 'authorized',
    failureCode: null,
    holdId: null,
    capturedAmount: null,
    merchantName: input.merchant?.name ?? null,
    merchantMcc: input.merchant?.mcc ?? null,
    description: input.description ?? null,
    expiresAt: null,
    createdAt: now,
    closedAt: null,
  }
}

/** The reservation: decided and applied to memory in this synchronous step, committed by the writer. */
function reserve(runtime: Runtime, payment: PaymentRow, info: AssetInfo, amountMinor: bigint, account: AccountEntry, now: Date, context: AuthorizeContext, deadline: number) {
  const externalId = account.externalId
  const hold = newPendingHold({
    // The payment's row records the hold: no row of `holds` is written for it.
    id: ownedHoldId(payment.id),
    orgId: payment.orgId,
    // The directory's string, not the request's copy of it: the hold may stay in memory for a day.
    accountId: account.id,
    asset: info.asset,
    amountMinor,
    expiresAtMs: now.getTime() + AUTHORIZATION_LIFETIME_MS,
    createdAtMs: now.getTime(),
    ownerId: payment.id,
  })
  const authorized: PaymentRow = { ...payment, holdId: hold.id, expiresAt: new Date(hold.expiresAtMs) }
  // One view serves the answer, the event's amount and expiry, and (as the same text) the saved idempotent answer.
  const view = toPaymentView(authorized)
  const body = JSON.stringify(view)
  const operation: LedgerOperation = {
    orgId: payment.orgId,
    // The payment's row records the reservation's movement too: no row of `ledger_movements` is
    // written for it (`server/ledger/journal.ts`).
    recordedByPayment: true,
    createdAt: now,
    deadline,
    postings: reservationPostings(hold),
    payments: [authorized],
    events: [eventRow(payment.orgId, 'payment.authorized', eventData(authorized, externalId, { holdId: hold.id, expiresAt: view.expiresAt }, view.amount), now)],
    idempotencyRecord: context.idempotency ? inlineRecord(context.idempotency, 201, body, runtime.clock.wallNowMs()) : undefined,
    reserve: () => {
      runtime.ledger.holds.open(hold)
    },
    revert: () => {
      runtime.ledger.holds.close(hold.id)
    },
    committed: (batch, queuedAt) => {
      hold.ownerDurable = true
      const trace = context.trace
      if (trace) {
        trace.batch = batch
        trace.queuedAt = queuedAt
      }
    },
  }
  // Throws `insufficient_available` synchronously, having changed nothing.
  const commit = runtime.ledger.submit(operation)
  return { operation, hold, commit, body }
}

/** An authorization's reservation: its amount from available to held. */
function reservationPostings(hold: PendingHold): Posting[] {
  const amountMinor = hold.amountMinor
  return [
    { accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor: -amountMinor },
    { accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor },
  ]
}

function declinedRow(payment: PaymentRow, failureCode: FailureCode): PaymentRow {
  return { ...payment, state: 'declined', failureCode, holdId: null, expiresAt: null, closedAt: payment.createdAt }
}

/**
 * The key was held by an earlier request: its saved answer is replayed (or the request refused as
 * a conflict). A decline given while a late write was still being closed wins over what the
 * database says for that moment.
 */
async function replayTakenKey(runtime: Runtime, orgId: string, context: AuthorizeContext, budget: Budget): Promise<AuthorizeAnswer> {
  const claim = context.idempotency!
  const request = { method: claim.method, path: claim.path, body: claim.requestBody, requestHash: claim.requestHash }
  const pending = stateOf(runtime).answersInFlight.get(inFlightId(orgId, claim.key))
  const found = pending
    ? { kind: 'done' as const, value: { method: claim.method, path: claim.path, requestBody: null, requestHash: pending.requestHash, state: 'completed' as const, responseStatus: 201, responseBody: pending.body } }
    : await budget.race(context.records.find(orgId, claim.key))
  if (found.kind !== 'done' || found.value === undefined) {
    throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
  }
  const outcome = judgeExisting(found.value, request)
  if (outcome.kind !== 'replay') throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
  return { kind: 'replay', status: outcome.status, body: outcome.body }
}

/**
 * The answer was a decline while the authorization was already being written, so it must never be
 * capturable. Its hold is marked
 * closing at once (capture, void and the sweeper all refuse a closing hold). If the late write
 * lands, the hold is released, the payment recorded declined and its saved idempotent answer
 * rewritten, in one commit; if it fails, the writer has undone it and only the decline is recorded.
 * Answers the decline's JSON, the text the caller gets.
 */
function failClosed(runtime: Runtime, hold: PendingHold, commit: Promise<void>, payment: PaymentRow, externalId: string, context: AuthorizeContext, failureCode: FailureCode = 'processing_timeout'): string {
  const state = stateOf(runtime)
  if (context.trace) context.trace.failureCode = failureCode
  hold.closing = true
  const declined: PaymentRow = { ...declinedRow(payment, failureCode), holdId: hold.id }
  const declinedBody = JSON.stringify(toPaymentView(declinedRow(payment, failureCode)))
  const claim = context.idempotency
  state.unsettled.set(payment.id, declined)
  if (claim) state.answersInFlight.set(inFlightId(payment.orgId, claim.key), { requestHash: claim.requestHash, body: declinedBody })
  const declinedEvent = (at: Date) => eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode }), at)
  const settle = (reported: boolean, error?: unknown) => async () => {
    // A commit reported as failed has landed if its payment is in Postgres (read once the database
    // answers again); memory, which undid it, then takes the database's balances and the hold back.
    const landed = reported || (error instanceof CommitFailedError && (await repo.findPayment(runtime.db, payment.orgId, payment.id))?.state === 'authorized')
    if (landed && !reported) {
      await runtime.ledger.writer.resync(deltasOf(payment.orgId, reservationPostings(hold), 1n))
      runtime.ledger.holds.restore(hold)
    }
    if (landed) {
      const now = runtime.clock.now(payment.orgId)
      const answer: IdempotencyAnswer | undefined = claim ? { orgId: claim.orgId, key: claim.key, responseStatus: 201, responseBody: declinedBody } : undefined
      // A failed close gives the hold back as pending (its revert); it must stay closed until the close lands.
      await submitClose(runtime, hold, declined, declinedEvent(now), now, answer).finally(() => {
        hold.closing = true
      })
      return
    }
    // A taken key means an earlier request owns it: only the decline itself is recorded.
    const record = claim && !(error instanceof IdempotencyKeyTaken) ? inlineRecord(claim, 201, declinedBody, runtime.clock.wallNowMs()) : undefined
    await state.declines.record({ ...declined, holdId: null }, declinedEvent(payment.createdAt), record)
  }
  commit
    .then(
      () => untilDurable(runtime, payment.id, settle(true)),
      (error: unknown) => untilDurable(runtime, payment.id, settle(false, error)),
    )
    .then(() => {
      state.unsettled.delete(payment.id)
      if (claim) state.answersInFlight.delete(inFlightId(payment.orgId, claim.key))
    })
  return declinedBody
}

/**
 * Retries `write` until it commits: a fail-closed decline whose close (or record) failed, because
 * the database went away again, would otherwise leave the late authorization in Postgres as
 * `authorized`, capturable after a restart. Memory keeps it uncapturable meanwhile. Stops only
 * when the service shuts down.
 */
async function untilDurable(runtime: Runtime, paymentId: string, write: () => Promise<void>): Promise<void> {
  for (let attempt = 0; !stateOf(runtime).stopped; attempt++) {
    try {
      await write()
      return
    } catch (error) {
      if (attempt % 20 === 0) logFailure('payments.fail-closed', `payments: the fail-closed decline of ${paymentId} is not durable yet; retrying`, error)
      await Bun.sleep(repo.retryDelayMs(attempt))
    }
  }
}

/**
 * Records a decline (with the request's idempotency record) and answers it; if the record is not
 * durable within the budget the answer is given anyway and the record finishes later.
 */
async function decline(runtime: Runtime, payment: PaymentRow, failureCode: FailureCode, externalId: string | null, budget: Budget, context: AuthorizeContext): Promise<AuthorizeAnswer> {
  const state = stateOf(runtime)
  if (context.trace) context.trace.failureCode = failureCode
  // Every decline answered is recorded: when the records are as far behind as memory may keep
  // them, the request is refused instead, with nothing decided, reserved or recorded (no payment
  // id is given out that could not be read back). Nothing was reserved on any path here.
  if (state.declines.full) {
    state.refusedUnrecordable += 1
    throw overloadedRefusal(`${state.declines.backlog} declines already wait to be recorded`)
  }
  const claim = context.idempotency
  // A decline normally waits for its record, so the answer is durable: readable from every
  // instance, in the event log, and, with an Idempotency-Key, the key's answer everywhere. It is
  // answered now, its record written in the background and read from memory until then (retried
  // until the database takes it, see `DeclineRecorder`), when waiting would only spend the budget:
  // - the database is known to be failing or stalled;
  // - the records are behind (past capacity, declines arrive faster than they are written), and
  //   the decline has no key. Waiting there made every decline take the whole budget, and answers
  //   crossed 500 ms once the server's thread was the bottleneck (7,171 of them in 8 s at 15,000/s
  //   offered). A keyed decline still waits, within the budget: its key must not be answered
  //   otherwise by another instance meanwhile;
  // - the budget is spent (its timer fired before the commit came, or the decline was reached
  //   after the deadline): a record raced now gets one more turn of the loop, never enough for a
  //   commit, and past capacity that turn is long (in a scratch log at 10,000/s, turns 60 to 140 ms
  //   late answered 256 to 1,056 such declines each), so the answer waited it out for nothing.
  //
  // A decline without a key waits for its own record at most `DECLINE_RECORD_LAG_MAX_MS`, the lag
  // past which records count as behind: a record slower than that is one falling behind, and the
  // first declines of a slow spell, with nothing behind them yet, otherwise waited out their whole
  // budget for it, answered at its end, which crosses 500 ms once the thread runs late (the
  // a scratch count at 10,000/s offered: 221 declines by admission in one second waited 348
  // ms each in the server for their records).
  const answerNow = budget.spent() || !runtime.ledger.writer.healthy() || (claim === undefined && state.declines.oldestWaitMs() > DECLINE_RECORD_LAG_MAX_MS)
  const { body, write, forgetAnswer } = startDeclineRecord(runtime, payment, failureCode, externalId, claim, answerNow)
  if (answerNow) return { kind: 'answer', body }
  const outcome = await (claim === undefined ? budget.raceFor(write, DECLINE_RECORD_LAG_MAX_MS) : budget.race(write))
  if (outcome.kind === 'done' && outcome.value === 'key_taken') {
    // An earlier request owns the key: its answer is the one to replay, not this one.
    forgetAnswer()
    return replayTakenKey(runtime, payment.orgId, context, budget)
  }
  return { kind: 'answer', body }
}

/**
 * A decline's answer, and its record started: the payment (read from memory until the record is
 * durable), its `payment.declined` event and, with a key, its saved answer, which a retry with the
 * same key replays from memory meanwhile rather than being decided again while the database is away.
 */
function startDeclineRecord(
  runtime: Runtime,
  payment: PaymentRow,
  failureCode: FailureCode,
  externalId: string | null,
  claim: InlineIdempotency | undefined,
  /** The decline is answered before its record is durable: nobody waits for the record. */
  answered: boolean,
): { body: string; write: Promise<'recorded' | 'key_taken'>; forgetAnswer: () => void } {
  const state = stateOf(runtime)
  const declined: PaymentRow = { ...payment, state: 'declined', failureCode, closedAt: payment.createdAt }
  const view = toPaymentView(declined)
  const body = JSON.stringify(view)
  state.unsettled.set(declined.id, declined)
  const record = claim ? inlineRecord(claim, 201, body, runtime.clock.wallNowMs()) : undefined
  const inFlight = claim ? { key: inFlightId(payment.orgId, claim.key), answer: { requestHash: claim.requestHash, body } } : undefined
  if (inFlight) state.answersInFlight.set(inFlight.key, inFlight.answer)
  const forgetAnswer = () => {
    if (inFlight && state.answersInFlight.get(inFlight.key) === inFlight.answer) state.answersInFlight.delete(inFlight.key)
  }
  const write = state.declines.record(declined, eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode }, view.amount), payment.createdAt), record, { answered })
  write
    .catch((error: unknown) => logFailure('payments.decline-record', `payments: recording decline ${declined.id} failed`, error))
    .finally(() => {
      state.unsettled.delete(declined.id)
      forgetAnswer()
    })
  return { body, write, forgetAnswer }
}

/** Closes a payment's hold: the whole hold back to available, the payment's new state in the same commit. */
function submitClose(runtime: Runtime, hold: PendingHold, payment: PaymentRow, event: ReturnType<typeof eventRow>, now: Date, idempotencyAnswer?: IdempotencyAnswer, idempotencyRecord?: IdempotencyRow): Promise<void> {
  const decimals = findAsset(hold.asset)!.decimals
  return runtime.ledger.submit({
    orgId: hold.orgId,
    movementId: newId('mv'),
    movementKind: 'payment_release',
    reference: payment.id,
    createdAt: now,
    postings: releasePostings(hold),
    holds: holdRowsToWrite(hold, holdRow(hold, 'released', now)),
    payments: [payment],
    events: [eventRow(hold.orgId, 'hold.released', { holdId: hold.id, accountId: hold.accountId, asset: hold.asset, amount: formatAmount(hold.amountMinor, decimals) }, now), event],
    idempotencyAnswer,
    idempotencyRecord,
    ...closingHooks(runtime, hold),
  })
}

async function findAny(runtime: Runtime, orgId: string, id: string): Promise<PaymentRow | undefined> {
  const unsettled = stateOf(runtime).unsettled.get(id)
  if (unsettled && unsettled.orgId === orgId) return unsettled
  return repo.findPayment(runtime.db, orgId, id)
}

/**
 * The payment's pending hold, taken in the caller's synchronous step. Anything but an authorized
 * payment with a pending hold is refused: `hold_expired` (422) once its 24 h have passed,
 * `hold_not_active` (409) when it is declined, captured, voided, or being captured or voided right
 * now; `hold_expired` also while its lapse is committing.
 */
async function takeAuthorized(runtime: Runtime, orgId: string, id: string): Promise<{ payment: PaymentRow; hold: PendingHold; externalId: string | null }> {
  const found = await findAny(runtime, orgId, id)
  if (!found) throw notFound('payment')
  const externalId = (await runtime.ledger.accounts.find(found.accountId))?.externalId ?? null
  // From here to the caller's `submit` everything is synchronous: no other request slips in.
  if (found.state === 'lapsed') throw new ApiError('hold_expired', `Payment ${id} lapsed at ${found.expiresAt?.toISOString()}`)
  if (found.state !== 'authorized' || !found.holdId) throw new ApiError('hold_not_active', `Payment ${id} is ${found.state}`)
  const pending = runtime.ledger.holds.get(found.holdId)
  // Postgres still says authorized while a capture, void or lapse of it commits, or just did.
  if (pending?.expiring) throw new ApiError('hold_expired', `Payment ${id} expired at ${new Date(pending.expiresAtMs).toISOString()}`)
  if (pending === undefined || pending.closing) throw new ApiError('hold_not_active', `Payment ${id} is closing`)
  return { payment: found, hold: takePendingHold(runtime, orgId, found.holdId, undefined, id), externalId }
}

/** One capture, at most the authorized amount, to the card-settlement account; the rest returns to available in the same commit. */
export async function capturePayment(runtime: Runtime, orgId: string, id: string, input: CapturePaymentInput): Promise<PaymentView> {
  const { payment, hold, externalId } = await takeAuthorized(runtime, orgId, id)
  const decimals = findAsset(hold.asset)!.decimals
  const authorizedMinor = hold.amountMinor
  const capturedMinor = input.amount === undefined ? authorizedMinor : parseAmount(input.amount, decimals, 'amount')
  if (capturedMinor > authorizedMinor) throw invalid('amount', `The capture of ${formatAmount(capturedMinor, decimals)} exceeds the ${formatAmount(authorizedMinor, decimals)} authorized`)
  const remainder = authorizedMinor - capturedMinor
  const now = runtime.clock.now(orgId)
  const captured: PaymentRow = { ...payment, state: 'captured', capturedAmount: capturedMinor, closedAt: now }
  const postings: Posting[] = [{ accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor: -authorizedMinor }]
  if (remainder > 0n) postings.push({ accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor: remainder })
  postings.push({ accountId: SYSTEM_ACCOUNTS.cardSettlement, kind: 'system', bucket: 'available', asset: hold.asset, amountMinor: capturedMinor })
  const amounts = { capturedAmount: formatAmount(capturedMinor, decimals), releasedAmount: formatAmount(remainder, decimals) }
  await runtime.ledger.submit({
    orgId,
    movementId: newId('mv'),
    movementKind: 'payment_capture',
    reference: payment.id,
    createdAt: now,
    postings,
    holds: holdRowsToWrite(hold, { ...holdRow(hold, 'captured', now), capturedAmount: capturedMinor }),
    payments: [captured],
    events: [
      eventRow(orgId, 'hold.captured', { holdId: hold.id, accountId: hold.accountId, asset: hold.asset, amount: formatAmount(hold.amountMinor, decimals), ...amounts, transferId: null }, now),
      eventRow(orgId, 'payment.captured', eventData(captured, externalId, amounts), now),
    ],
    idempotencyRecord: answerInCommit(toPaymentView(captured)),
    ...closingHooks(runtime, hold),
  })
  return toPaymentView(captured)
}

/** Releases the whole authorization back to available. */
export async function voidPayment(runtime: Runtime, orgId: string, id: string): Promise<PaymentView> {
  const { payment, hold, externalId } = await takeAuthorized(runtime, orgId, id)
  const now = runtime.clock.now(orgId)
  const voided: PaymentRow = { ...payment, state: 'voided', closedAt: now }
  await submitClose(runtime, hold, voided, eventRow(orgId, 'payment.voided', eventData(voided, externalId), now), now, undefined, answerInCommit(toPaymentView(voided)))
  return toPaymentView(voided)
}

export async function getPayment(runtime: Runtime, orgId: string, id: string): Promise<PaymentView> {
  const row = await findAny(runtime, orgId, id)
  if (!row) throw notFound('payment')
  return toPaymentView(row)
}

export async function listPayments(runtime: Runtime, orgId: string, query: { accountId?: string; state?: PaymentState; after?: string; limit?: number }): Promise<{ payments: PaymentView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listPayments(runtime.db, orgId, { accountId: query.accountId, state: query.state, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toPaymentView)
  return { payments: page.items, hasMore: page.hasMore }
}
