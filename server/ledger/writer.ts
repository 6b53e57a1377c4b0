import { inArray } from 'drizzle-orm'
import type { PgTable } from 'drizzle-orm/pg-core'
import type { IdempotencyRow } from '../platform/idempotency.ts'
import { insertFromJson, jsonParameter, OP_COLUMN, StatementTexts, statementWith, upsertTail, type TextStatement } from '../../db/bulk.ts'
import { queryText, type Database, type Transaction } from '../../db/client.ts'
import { chainArrivals, deposits, events, holds, ledgerBalances, ledgerMovements, payments, transfers } from '../../db/schema/index.ts'
import { assert } from '../lib/assert.ts'
import { ApiError } from '../lib/errors.ts'
import { logFailure } from '../lib/log.ts'
import { LatencyHistogram } from '../lib/histogram.ts'
import { Pace } from '../lib/pace.ts'
import { claimParts, IdempotencyKeyTaken, NOT_LOST, recordId } from '../platform/idempotency.ts'
import { balanceKey, deltasOf, type BalanceDelta, type HotBalance, type HotBalances, type Posting } from './hot-balances.ts'

export type HoldRow = typeof holds.$inferInsert
export type TransferRow = typeof transfers.$inferInsert
export type EventRow = typeof events.$inferInsert
export type PaymentRow = typeof payments.$inferInsert
export type DepositRow = typeof deposits.$inferInsert
export type ChainArrivalRow = typeof chainArrivals.$inferInsert

/** A saved answer replaced in the same commit (an answer that changed after it was queued). */
export interface IdempotencyAnswer {
  orgId: string
  key: string
  responseStatus: number
  responseBody: string
}

/**
 * Everything one operation writes. The writer turns a batch of these into a handful of multi-row
 * statements, so a batch of a hundred costs about as many round trips as a batch of one.
 */
export type LedgerOperation = OperationWrites & (OwnMovement | MovementInPayment)

/** The movement is written as a row of its own in `ledger_movements` (its legs in its row). */
interface OwnMovement {
  movementId: string
  movementKind: string
  /** The resource that caused the movement (`tr_…`, `hold_…`, `pay_…`, a sandbox funding id). */
  reference: string
  recordedByPayment?: undefined
}

/**
 * An authorization's reservation, recorded by the operation's own payment row instead of a row of
 * `ledger_movements`: that row already holds everything the movement would (organization, account,
 * asset, amount, time, and `hold_id`, set only on a payment whose reservation committed with it),
 * and a movement row cost Postgres a heap tuple and two index entries more per authorization. Its
 * two legs (amount from the account's available to its held) are derived from the payment wherever
 * the journal is read (`server/ledger/journal.ts`); the database refuses any change to those columns
 * once written (migration 0013). `Ledger.submit` checks the postings are exactly those legs.
 */
interface MovementInPayment {
  recordedByPayment: true
}

/** Everything an operation writes and does besides its movement's own record. */
interface OperationWrites {
  orgId: string
  createdAt: Date
  postings: Posting[]
  holds?: HoldRow[]
  transfers?: TransferRow[]
  payments?: PaymentRow[]
  /** Deposits and the chain arrivals that fund them, written (or moved to a new state) in the commit that moves their money. */
  deposits?: DepositRow[]
  chainArrivals?: ChainArrivalRow[]
  events?: EventRow[]
  /**
   * Conditional writes this operation depends on (a quote executed once, a withdrawal closed once),
   * run first in its commit. One that answers false refuses this operation alone: its reservation
   * is undone and it fails with `refusal()`, while the rest of its batch commits without it.
   * In-process decisions already exclude such races; these catch another instance getting there first.
   */
  guardedWrites?: GuardedWrite[]
  /**
   * The request's idempotency record, completed with its answer. It is inserted first in the
   * batch's transaction; if the key is already held by a live record the operation is taken out of
   * the batch, its reservation undone, and it fails with `IdempotencyKeyTaken`.
   */
  idempotencyRecord?: IdempotencyRow
  idempotencyAnswer?: IdempotencyAnswer
  /**
   * `performance.now()` after which the caller no longer waits (an authorization's budget). An
   * operation still queued that could not commit before it is withdrawn instead of being written
   * late: under overload the writer spends its time on operations that can still make it.
   */
  deadline?: number
  /** Memory beyond balances (a hold's state), changed in the same step as the reservation. */
  reserve?: () => void
  /** Undoes `reserve` when the commit fails. */
  revert?: () => void
  /**
   * Memory to settle once the commit is durable (forget a closed hold). It is told when its batch
   * went out and committed and when the operation was queued, which the slow-authorization log
   * reads (`GET /ops/v1/payments/slow`).
   */
  committed?: (batch: BatchTiming, queuedAt: number) => void
}

/** A committed batch's times (`performance.now()`), one object shared by its operations. */
export interface BatchTiming {
  /** When the batch was sent to Postgres. */
  readonly sentAt: number
  /** When its commit was confirmed. */
  readonly committedAt: number
  /** Operations it carried. */
  readonly operations: number
  /** Batches already in flight on the connection when it was sent, which Postgres answered first. */
  readonly behind: number
}

export interface GuardedWrite {
  /** Runs on the batch's transaction; false when the condition no longer holds (nothing was written). */
  write(tx: Transaction): Promise<boolean>
  refusal(): ApiError
}

/** Some operations of a batch lost a guarded write; the transaction was rolled back and is retried without them. */
class GuardsRefusedError extends Error {
  constructor(readonly refused: Map<Queued, ApiError>) {
    super('guarded writes refused')
  }
}

interface Queued {
  op: LedgerOperation
  deltas: Map<string, BalanceDelta>
  /** Taken back before a batch took it: already undone, skipped by the writer. */
  withdrawn: boolean
  /** When it was queued (`performance.now()`). */
  queuedAt: number
  /**
   * Set on the operations of a failed batch sent again to find the one at fault: those sharing
   * this object go in a batch of their own (see `isolateFailure`).
   */
  isolation?: object
  resolve: () => void
  reject: (error: unknown) => void
}

/** Operations of a bundle written per statement of its transaction (`commitAside`). */
const ASIDE_OPERATIONS_PER_STATEMENT = 1

/** A bundle's guarded write answered false (`commitAside`): rolled back, refused with `refusal`. */
class GuardRefusal extends Error {
  constructor(readonly refusal: ApiError) {
    super('guarded write refused')
  }
}

/** The summed deltas of a bundle's operations, one per balance. */
function asideDeltas(ops: LedgerOperation[]): Map<string, BalanceDelta> {
  const into = new Map<string, BalanceDelta>()
  for (const op of ops) deltasOf(op.orgId, op.postings, 1n, into)
  return into
}

/** The operation was withdrawn before it was written: nothing of it was applied. */
export class OperationWithdrawn extends Error {
  constructor() {
    super('The operation was withdrawn before it was written')
  }
}

export { IdempotencyKeyTaken }

/** Distinguishes "the database refused" from a business rule; callers answer it as internal. */
export class CommitFailedError extends ApiError {
  constructor(cause: unknown) {
    super('internal', 'The ledger could not commit this operation; nothing was applied')
    this.cause = cause
  }
}

export interface WriterOptions {
  groupCommit: boolean
  /** Upper bound on operations per batch (one statement). */
  batchMax: number
  /**
   * How many batches may be on their way to Postgres at once. Each batch is one statement that
   * commits by itself, sent on the writer's own connection, where Postgres runs them one after
   * another in the order sent; with more than one in flight the next batch is built and on the wire
   * while the previous one executes and flushes. 1 for PGlite, which runs in process.
   */
  pipelineDepth: number
  /**
   * A batch goes out while another is in flight only once at least this many operations wait for
   * it; fewer wait for the batch ahead to commit and go together. Pipelining lets Postgres start the
   * next batch while the server is still busy elsewhere (its one thread reads the answer only between
   * requests), but a small batch pays the statement's fixed cost for few operations: sent as soon as
   * anything waited, pipelined batches shrank to about a dozen operations and cost more CPU than they
   * saved. A batch with nothing in flight ahead of it is sent at once, whatever its size.
   */
  pipelineMinOperations: number
}

/** The writer's order guard, the batch statement's inputs besides the rows. */
interface Guard {
  writerId: string
  seq: number
}

/** A batch on its way: sent, not yet answered. */
interface Flight {
  batch: Queued[]
  seq: number
  sentAt: number
  /** Batches in flight ahead of it when it was sent. */
  behind: number
  /** Operations that lost their key to an earlier operation of the same batch; rejected once the batch is answered. */
  keyTaken: Queued[]
  /** Given up by a failure of an earlier batch: already undone and rejected, its answer is ignored. */
  abandoned: boolean
  /** `asideGeneration` when it was sent, and whether a bundle was committing aside then. */
  asideGeneration?: number
  asideActive?: boolean
  /** Its answer, once its promise settled; handled when every batch sent before it has been. */
  answer?: { rows: Array<Record<string, string | null>> | undefined; error: unknown }
}

/** What a batch statement answers: the balance rows it wrote, and the operations whose key was already held. */
interface BatchResult {
  written: HotBalance[]
  lostOps: Set<number>
}

/**
 * Holds and payments are opened and closed by different operations, possibly in one batch; the
 * last state queued for an id is the one written (queue order is decision order).
 */
function lastStatePerId<Row extends { id: string }>(rows: Array<{ row: Row; op: number }>): Array<{ row: Row; op: number }> {
  const latest = new Map<string, { row: Row; op: number }>()
  for (const entry of rows) latest.set(entry.row.id, entry)
  return [...latest.values()]
}

/**
 * A payment created in a batch is not also moved to a new state in it: its capture, void or lapse
 * needs it committed first. Two parts of one statement writing the same row would fail the batch.
 */
function assertCreatedOnce(created: Array<{ row: PaymentRow }>, moved: Array<{ row: PaymentRow }>): void {
  if (created.length === 0 || moved.length === 0) return
  const ids = new Set(created.map((entry) => entry.row.id))
  for (const entry of moved) assert(!ids.has(entry.row.id), `payment ${entry.row.id} is created and moved in one batch`)
}

/** Rows of one kind from every operation of a batch, each with its operation's index. */
function rowsOf<Row>(ops: LedgerOperation[], pick: (op: LedgerOperation) => Row[] | undefined): Array<{ row: Row; op: number }> {
  const rows: Array<{ row: Row; op: number }> = []
  ops.forEach((op, index) => {
    for (const row of pick(op) ?? []) rows.push({ row, op: index })
  })
  return rows
}

/**
 * Whether a batch failed on what one of its operations carried (SQLSTATE class 22, data exception:
 * a string Postgres cannot store; class 23, integrity: a duplicate key, a balance check), rather
 * than on the database or the connection: then the operation at fault is found and the others go on.
 */
export function isOperationFault(error: unknown): boolean {
  // The driver's error, or the one a query builder wrapped it in.
  for (let current = error, depth = 0; current instanceof Error && depth < 3; current = current.cause, depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string' && code.length === 5) return code.startsWith('22') || code.startsWith('23')
  }
  return false
}

/** After a failed batch, how long callers with a deadline are told at once that they cannot make it. */
const FAIL_FAST_MS = 250
/** A batch answered later than this is treated as stuck (healthy batches here take a few milliseconds, under load tens). */
const STALLED_BATCH_MS = 150
const STALLED_BATCH_FACTOR = 20
/** A batch is pipelined only behind one out for at most this many times the recent batch latency, or this floor (see `worthPipelining`). */
const PIPELINE_BEHIND_FACTOR = 2
const PIPELINE_BEHIND_MIN_MS = 5
/** Each committed batch's share of the recent batch latency and pace. */
const PACE_WEIGHT = 0.2


/**
 * The group-commit writer. Operations queue in decision order; the writer takes whatever has
 * queued (up to `batchMax`, or exactly one with group commit off) and writes it as ONE statement
 * that commits by itself: every insert and the balance update are parts of one statement (CTEs),
 * each reading its rows from a JSON parameter, so a batch costs one round trip and one WAL flush
 * whatever its size,
 * and up to `pipelineDepth` batches are in flight at once on the writer's own connection. Callers
 * are resolved only after their batch committed.
 *
 * Order: every batch also moves the writer's guard row from its predecessor's sequence number to its
 * own, and refuses itself (rolling back entirely) when the row is not where it expects: a batch
 * commits only if every batch sent before it did. A failure therefore fails that batch, everything
 * in flight behind it and everything queued (they were decided against reservations that are now
 * void); their reservations are undone, memory is reconciled with Postgres, and the writer starts a
 * new guard row before sending again.
 *
 * Operations with guarded writes (a quote consumed once, a withdrawal closed once) go in a
 * transaction of their own batch, alone on the connection, with their conditional writes first.
 */
export class GroupCommitWriter {
  private queue: Queued[] = []
  private resyncs: Array<{ touched: Map<string, BalanceDelta>; resolve: () => void; reject: (error: unknown) => void }> = []
  /** Queued operations by identity, so one can be withdrawn without searching the queue. */
  private readonly waiting = new Map<LedgerOperation, Queued>()
  /** Batches sent and not yet answered, oldest first (Postgres answers them in this order). */
  private inFlight: Flight[] = []
  /** A transaction batch or a reconciliation owns the connection: nothing else is sent. */
  private exclusive = false
  /** Balances touched by failed batches, read back from Postgres before anything more is sent. */
  private recovering: Map<string, BalanceDelta> | undefined
  private pumping = false
  private idleWaiters: Array<() => void> = []
  private guard: Guard = { writerId: newWriterId(), seq: 0 }
  committedOperations = 0
  committedBatches = 0
  /** From sending a batch to Postgres confirming its commit, per committed batch (disk flush and queueing behind earlier batches included). */
  readonly commitLatency = new LatencyHistogram()
  /**
   * From queueing an operation to sending the batch that carries it, per operation sent: the wait
   * for the batch ahead to commit (the pipeline is full) and for a transaction batch or a
   * reconciliation to finish. An operation's time to durable is this plus its batch's commit.
   */
  readonly queueWait = new LatencyHistogram()
  /**
   * From queueing an operation to its batch's commit, per committed operation: what a caller waits
   * for the ledger. Unlike `commitLatency` (one count per batch), a large, slow batch counts once for
   * each operation it carries, so the tail shows what callers met when batches grew.
   */
  readonly durableLatency = new LatencyHistogram()
  /** Commit-point checks that found memory and Postgres apart (a bug); memory took Postgres' values. */
  invariantBreaches = 0
  /** Recent batch latency and operations per millisecond (moving averages), for `expectedWaitMs`. */
  private batchMs = 0
  private readonly pace = new Pace(PACE_WEIGHT)
  private lastAnsweredAt = 0
  /** When the last batch failed, if none has committed since (`performance.now()`), else 0. */
  private failedAt = 0
  /** Memory is being read back from Postgres after a failed batch: nothing is sent until it ends. */
  private reconciling = false
  /** Due when the oldest batch in flight would count as stuck (see `watchStalls`). */
  private stallWatch: ReturnType<typeof setTimeout> | undefined
  /** Deltas of bundles committing beside the batches (`commitAside`), reserved in memory and not yet in Postgres. */
  private readonly aside = new Set<Map<string, BalanceDelta>>()
  /**
   * Moves whenever a bundle starts or ends committing aside. A batch whose flight overlapped one
   * cannot tell whether the database rows it read back include that bundle's deltas, so its
   * commit-point check is skipped (verify still proves the ledger); reconciliation waits for them.
   */
  private asideGeneration = 0

  constructor(
    private readonly db: Database,
    private readonly writerDb: Database,
    private readonly balances: HotBalances,
    private readonly options: WriterOptions,
  ) {
    assert(options.pipelineDepth >= 1, 'the writer sends at least one batch at a time')
  }

  /** Reserves in memory (already done by the caller) and resolves once the commit is durable. */
  enqueue(op: LedgerOperation, deltas: Map<string, BalanceDelta>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const item: Queued = { op, deltas, withdrawn: false, queuedAt: performance.now(), resolve, reject }
      this.queue.push(item)
      this.waiting.set(op, item)
      this.pump()
    })
  }

  /**
   * Commits a bundle (`Ledger.submitBundle`), its deltas already reserved in memory, as one
   * transaction of its own on the shared pool (`db`), beside the batches and not through their
   * queue: a settlement of many thousand operations must not hold the request path's writes behind
   * it. Balances are written by adding deltas, so its commit and the batches' commute; while it is
   * on its way its deltas count as pending at every commit point. Its guarded writes run first; one
   * answering false rolls it back and it rejects with that write's refusal. A failure undoes its
   * reservation and has the balances it touched read back before the writer sends again.
   */
  async commitAside(ops: LedgerOperation[], guardedWrites: GuardedWrite[], deltas: Map<string, BalanceDelta>): Promise<void> {
    this.aside.add(deltas)
    this.asideGeneration += 1
    try {
      await this.db.transaction(async (tx) => {
        for (const guarded of guardedWrites) if (!(await guarded.write(tx))) throw new GuardRefusal(guarded.refusal())
        const flight: Flight = { batch: [], seq: 0, sentAt: performance.now(), behind: 0, keyTaken: [], abandoned: false }
        // A few operations per statement: each statement is built while the previous one runs in
        // Postgres, never the whole bundle in one synchronous step of this thread.
        for (let from = 0; from < ops.length; from += ASIDE_OPERATIONS_PER_STATEMENT) {
          await queryText(tx, this.batchStatement(flight, ops.slice(from, from + ASIDE_OPERATIONS_PER_STATEMENT)))
        }
      })
    } catch (error) {
      this.aside.delete(deltas)
      this.asideGeneration += 1
      this.balances.apply([...deltas.values()].map((delta) => ({ ...delta, available: -delta.available, held: -delta.held, inFlight: -delta.inFlight })))
      for (const op of [...ops].reverse()) op.revert?.()
      if (error instanceof GuardRefusal) throw error.refusal
      // Whatever was decided against the reservation meanwhile is judged again against Postgres.
      const touched = this.recovering ?? new Map<string, BalanceDelta>()
      for (const [key, delta] of deltas) touched.set(key, delta)
      this.recovering = touched
      this.pump()
      throw new CommitFailedError(error)
    }
    this.aside.delete(deltas)
    this.asideGeneration += 1
    // Its rows were read back while batches may have committed beside it: no commit-point check
    // here (see `asideGeneration`); verify proves the ledger. A reconciliation waiting for it may go.
    this.pump()
    const now = performance.now()
    const timing: BatchTiming = { sentAt: now, committedAt: now, operations: ops.length, behind: 0 }
    for (const op of ops) op.committed?.(timing, now)
  }

  /** See `Ledger.withdraw`. */
  withdraw(op: LedgerOperation): boolean {
    const item = this.waiting.get(op)
    if (item === undefined) return false
    this.waiting.delete(op)
    item.withdrawn = true
    this.undo(item)
    item.reject(new OperationWithdrawn())
    return true
  }

  /**
   * How long an operation queued now would wait for its commit, from the recent pace: what is
   * queued ahead of it divided by the recent rate, plus one batch. Callers with a deadline (an
   * authorization) decline at once when it cannot be met, instead of queueing work that would only
   * be withdrawn: under overload the writer keeps approving at its capacity.
   */
  expectedWaitMs(): number {
    if (!this.healthy()) return Number.POSITIVE_INFINITY
    // Idle, an operation is sent at once: the pace of past batches says nothing about it (and an
    // estimate left high by a slow batch must not keep refusing work that would show it is stale).
    const operationsPerMs = this.pace.perMs
    if (operationsPerMs === 0 || (this.waiting.size === 0 && this.inFlight.length === 0)) return 0
    return this.waiting.size / operationsPerMs + this.batchMs
  }

  /**
   * False while the database is known to be failing or stuck, when nothing could commit in time:
   * right after a batch failed (the database refused or went away) until FAIL_FAST_MS later or a
   * batch commits, until memory has been read back from Postgres after it (again FAIL_FAST_MS more
   * if that read fails too), and while a batch has been in flight far longer than batches take (a stalled
   * connection, or one being re-established, where the driver retries instead of failing). Callers
   * with a deadline then answer at once instead of spending their budget; the writer keeps taking
   * operations, so it finds out by itself when the database is back.
   */
  healthy(): boolean {
    const now = performance.now()
    if (this.failedAt !== 0 && now - this.failedAt < FAIL_FAST_MS) return false
    // After a failed batch nothing is sent before memory has been read back from Postgres, and
    // while the database refuses, that read waits on the driver's reconnects.
    if (this.recovering !== undefined || this.reconciling) return false
    const oldest = this.inFlight[0]
    return oldest === undefined || now - oldest.sentAt <= this.stalledAfterMs()
  }

  /**
   * Whether a batch may go out behind the ones in flight: enough operations wait for it
   * (`pipelineMinOperations`), and the oldest in flight is not overdue. A batch out much longer than
   * batches take may be stuck; what is sent behind it then only waits with it, past its callers'
   * deadlines, where queued it could still be withdrawn (`watchStalls`).
   */
  private worthPipelining(): boolean {
    if (this.waiting.size < this.options.pipelineMinOperations) return false
    const oldest = this.inFlight[0]
    return oldest === undefined || performance.now() - oldest.sentAt <= this.overdueAfterMs()
  }

  /** How long a batch may be in flight before nothing more is pipelined behind it: a few times what batches take here. */
  overdueAfterMs(): number {
    return Math.max(PIPELINE_BEHIND_MIN_MS, PIPELINE_BEHIND_FACTOR * this.batchMs)
  }

  /**
   * How long a batch may be in flight before it counts as stuck: far longer than batches take here,
   * the floor, or many times the recent batch latency on a slow machine.
   */
  stalledAfterMs(): number {
    return Math.max(STALLED_BATCH_MS, STALLED_BATCH_FACTOR * this.batchMs)
  }

  /**
   * Once the oldest batch in flight has been out long enough to count as stuck, the queued
   * operations that have a deadline (authorizations) are withdrawn at once, rather than each waiting
   * behind the stuck batch until its own deadline: nothing queued behind it can commit before the
   * stuck batch does. Their callers decline at once, as those arriving after the stall was noticed
   * already do (`healthy`). Operations without a deadline stay queued. One timer, re-armed for the
   * next oldest batch only when it fires.
   */
  private watchStalls(): void {
    if (this.stallWatch !== undefined) return
    const oldest = this.inFlight[0]
    if (oldest === undefined) return
    this.stallWatch = setTimeout(() => {
      this.stallWatch = undefined
      if (this.inFlight[0] !== oldest) {
        this.watchStalls()
        return
      }
      if (performance.now() - oldest.sentAt < this.stalledAfterMs()) {
        // The recent pace slowed meanwhile and moved the mark: look again then.
        this.watchStalls()
        return
      }
      for (const item of this.queue) if (!item.withdrawn && item.op.deadline !== undefined) this.withdraw(item.op)
    }, Math.max(0, oldest.sentAt + this.stalledAfterMs() - performance.now()))
    this.stallWatch.unref?.()
  }

  /** Resolves when nothing is queued, in flight or being reconciled. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve()
    return new Promise((resolve) => this.idleWaiters.push(resolve))
  }

  pendingCount(): number {
    return this.waiting.size
  }

  inFlightCount(): number {
    return this.inFlight.length
  }

  /**
   * Takes the database's values into memory for these balances (plus what is still queued), when
   * nothing is in flight. For a caller that learns a commit reported as failed did land after all
   * (its reply was lost with the connection). Rejects if the database cannot be read.
   */
  resync(touched: Map<string, BalanceDelta>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.resyncs.push({ touched, resolve, reject })
      this.pump()
    })
  }

  /** Batches that may be in flight at once. */
  get pipelineDepth(): number {
    return this.options.pipelineDepth
  }

  /**
   * Every wait of the writer for Postgres goes through here: a batch statement, or a guarded
   * batch's transaction. (Tests replace it to stall the writer as a slow database would.)
   */
  private execute<T>(run: () => Promise<T>): Promise<T> {
    return run()
  }

  private isIdle(): boolean {
    return this.queue.length === 0 && this.inFlight.length === 0 && !this.exclusive && this.resyncs.length === 0 && this.recovering === undefined
  }

  /** Sends what can be sent now; called whenever something is queued or a batch is answered. */
  private pump(): void {
    if (this.pumping) return
    this.pumping = true
    try {
      while (!this.exclusive) {
        if (this.recovering !== undefined || this.resyncs.length > 0) {
          // Read back only with nothing on its way, bundles committing aside included.
          if (this.inFlight.length === 0 && this.aside.size === 0) void this.runExclusive(() => this.reconcile())
          break
        }
        const head = this.firstLive()
        if (head === undefined) break
        if (head.op.guardedWrites !== undefined && head.op.guardedWrites.length > 0) {
          if (this.inFlight.length === 0) void this.runExclusive(() => this.sendGuarded())
          break
        }
        if (this.inFlight.length >= this.options.pipelineDepth) break
        if (this.inFlight.length > 0 && (head.isolation !== undefined || !this.worthPipelining())) break
        const batch = this.takeBatch(false)
        if (batch.length > 0) this.send(batch)
      }
    } finally {
      this.pumping = false
    }
    if (this.isIdle()) for (const wake of this.idleWaiters.splice(0)) wake()
  }

  private firstLive(): Queued | undefined {
    while (this.queue.length > 0 && this.queue[0]!.withdrawn) this.queue.shift()
    return this.queue[0]
  }

  /**
   * Takes the next batch off the queue; from here on its operations can no longer be withdrawn. A
   * pipelined batch stops before the next operation with guarded writes (those go in a transaction).
   */
  private takeBatch(guarded: boolean): Queued[] {
    const batchMax = this.options.groupCommit ? this.options.batchMax : 1
    const batch: Queued[] = []
    // Behind batches in flight, this one commits about a batch's latency after they do. An idle
    // writer sends at once and only an operation already past its deadline is left out: the pace
    // of past batches may be stale (one slow spell can leave it above the whole budget), and with
    // nothing sent it would never be measured again, so every operation would be withdrawn for good.
    const latestStart = performance.now() + (this.inFlight.length > 0 ? this.batchMs : 0)
    // Operations sent again to find the one that failed their batch go only with their own group.
    const isolation = this.firstLive()?.isolation
    let taken = 0
    while (batch.length < batchMax && taken < this.queue.length) {
      const item = this.queue[taken]!
      if (item.withdrawn) {
        taken += 1
        continue
      }
      if (item.isolation !== isolation) break
      if (!guarded && item.op.guardedWrites !== undefined && item.op.guardedWrites.length > 0) break
      taken += 1
      if (item.op.deadline !== undefined && item.op.deadline < latestStart) {
        // It would commit after its caller stopped waiting: withdrawn now rather than written late.
        this.withdraw(item.op)
        continue
      }
      this.waiting.delete(item.op)
      batch.push(item)
    }
    this.queue.splice(0, taken)
    return batch
  }

  /** Sends a batch as one pipelined statement; its answer is handled in order by `answered`. */
  private send(batch: Queued[]): void {
    const flight: Flight = { batch, seq: this.guard.seq + 1, sentAt: performance.now(), behind: this.inFlight.length, keyTaken: this.separateDuplicateClaims(batch), abandoned: false, asideGeneration: this.asideGeneration, asideActive: this.aside.size > 0 }
    let statement: TextStatement
    try {
      statement = this.batchStatement(flight)
    } catch (error) {
      // Nothing was sent: the guard does not move, and the failure is this batch's alone.
      this.failBatches([flight], error)
      this.pump()
      return
    }
    this.guard = { ...this.guard, seq: flight.seq }
    this.inFlight.push(flight)
    this.watchStalls()
    this.recordQueueWait(flight)
    this.execute(() => queryText<Record<string, string | null>>(this.writerDb, statement)).then(
      (rows) => this.received(flight, rows, undefined),
      (error: unknown) => this.received(flight, undefined, error),
    )
  }

  /**
   * A batch's promise settled. Postgres answers one connection's statements in order, but the
   * promises carrying those answers need not settle in that order: two answers read from one
   * packet settle in the same turn, and a promise that passes through one more async step than
   * another (a wrapper around `execute`) settles after it; and postgres.js sends again, behind those
   * sent after it, a statement whose prepared form the server lost. So an answer waits on its
   * flight until every batch sent before it has been handled: answers are handled in the order
   * the batches were sent.
   */
  private received(flight: Flight, rows: Array<Record<string, string | null>> | undefined, error: unknown): void {
    flight.answer = { rows, error }
    for (let head = this.inFlight[0]; head?.answer !== undefined; head = this.inFlight[0]) this.answered(head, head.answer)
  }

  private recordQueueWait(flight: Flight): void {
    for (const item of flight.batch) this.queueWait.record(flight.sentAt - item.queuedAt)
  }

  /** The answer (rows or error) of the oldest batch in flight, `flight`; every branch takes it off `inFlight`. */
  private answered(flight: Flight, { rows, error }: NonNullable<Flight['answer']>): void {
    if (flight.abandoned) {
      this.inFlight.shift()
      this.pump()
      return
    }
    if (rows === undefined) {
      if (isOperationFault(error)) this.isolateFailure(error)
      else this.failInFlight(error)
      this.pump()
      return
    }
    this.inFlight.shift()
    this.settle(flight, readResult(rows))
    this.pump()
  }

  /** A committed batch: lost claims undone, memory checked against Postgres, callers resolved. */
  private settle(flight: Flight, result: BatchResult): void {
    const { batch } = flight
    const lost = batch.filter((_, index) => result.lostOps.has(index))
    for (const item of [...lost].reverse()) this.undo(item)
    if (!flight.asideActive && flight.asideGeneration === this.asideGeneration) this.checkCommitPoint(result.written)
    const now = performance.now()
    const latencyMs = now - flight.sentAt
    this.recordPace(batch.length - lost.length, latencyMs, now - Math.max(flight.sentAt, this.lastAnsweredAt))
    this.commitLatency.record(latencyMs)
    this.lastAnsweredAt = now
    this.failedAt = 0
    this.committedBatches += 1
    this.committedOperations += batch.length - lost.length
    const timing: BatchTiming = { sentAt: flight.sentAt, committedAt: now, operations: batch.length - lost.length, behind: flight.behind }
    batch.forEach((item, index) => {
      if (result.lostOps.has(index)) return
      this.durableLatency.record(now - item.queuedAt)
      item.op.committed?.(timing, item.queuedAt)
      item.resolve()
    })
    this.rejectKeyTaken([...lost, ...flight.keyTaken])
  }

  private recordPace(operations: number, latencyMs: number, serviceMs: number): void {
    this.batchMs = this.batchMs === 0 ? latencyMs : this.batchMs * (1 - PACE_WEIGHT) + latencyMs * PACE_WEIGHT
    this.pace.record(operations, serviceMs)
  }

  /**
   * The oldest batch in flight failed. Every batch behind it will be refused by the order guard (or
   * fail with the same connection), and everything queued was decided against reservations that
   * are now void: all of it is undone and failed now, and nothing is sent until memory has been
   * reconciled with Postgres.
   */
  private failInFlight(error: unknown): void {
    const flights = this.inFlight.slice()
    this.inFlight.shift()
    for (const flight of flights.slice(1)) flight.abandoned = true
    this.failBatches(flights, error)
  }

  /**
   * The oldest batch in flight failed on its data (`isOperationFault`): one of its operations is at
   * fault, and the others must not fail with it (one tenant's bad row would decline another's
   * authorizations). Nothing of it or of the batches behind it landed (the order guard refuses
   * those), so they all go back to the head of the queue with their reservations standing: the
   * failed batch in two halves, each sent alone as a batch of its own, the batches behind it as
   * they were. A half that fails is halved again; an operation failing alone is the one at fault:
   * it is undone and gets the error. Undoing a reservation only gives money back, so the decisions
   * queued behind it stay valid (one that needed the money it credited fails its own balance check
   * and is found the same way). A fresh order guard starts, so a batch sent before can never land
   * after these.
   */
  private isolateFailure(error: unknown): void {
    const [failed, ...behind] = this.inFlight
    this.inFlight.shift()
    for (const flight of behind) flight.abandoned = true
    this.guard = { writerId: newWriterId(), seq: 0 }
    const batch = failed!.batch
    const again: Queued[] = []
    if (batch.length === 1) {
      const guilty = batch[0]!
      logFailure('ledger.operation', 'ledger: an operation failed its commit on its own; it was undone, the rest goes on', error)
      this.undo(guilty)
      guilty.reject(new CommitFailedError(error))
    } else {
      const half = Math.ceil(batch.length / 2)
      const first = {}
      const second = {}
      batch.forEach((item, index) => {
        item.isolation = index < half ? first : second
        again.push(item)
      })
    }
    for (const flight of behind) again.push(...flight.batch)
    for (const item of again) this.waiting.set(item.op, item)
    this.queue.unshift(...again)
    // A key's second claim in one batch lost to the first when the batch was built, as ever.
    this.rejectKeyTaken([failed!, ...behind].flatMap((flight) => flight.keyTaken))
  }

  private failBatches(flights: Flight[], error: unknown): void {
    const queued = this.queue.splice(0).filter((item) => !item.withdrawn)
    this.waiting.clear()
    this.failedAt = performance.now()
    const failed = [...flights.flatMap((flight) => [...flight.batch, ...flight.keyTaken]), ...queued]
    logFailure('ledger.batch', `ledger: a batch of ${flights[0]!.batch.length} operation(s) failed; failing ${failed.length} uncommitted operation(s)`, error)
    // Undo in reverse order of reservation, so each undo sees the state its reservation left.
    for (const item of [...failed].reverse()) this.undo(item)
    const touched = this.recovering ?? new Map<string, BalanceDelta>()
    for (const item of failed) for (const [key, delta] of item.deltas) touched.set(key, delta)
    this.recovering = touched
    // A new guard row: whatever became of the failed batches, the next one starts a fresh sequence.
    this.guard = { writerId: newWriterId(), seq: 0 }
    const failure = new CommitFailedError(error)
    for (const item of failed) item.reject(failure)
  }

  /** Runs `task` alone on the connection (nothing in flight, nothing else sent meanwhile). */
  private async runExclusive(task: () => Promise<void>): Promise<void> {
    assert(this.inFlight.length === 0 && !this.exclusive, 'an exclusive task runs alone')
    this.exclusive = true
    try {
      await task()
    } catch (error) {
      console.error('ledger: writer task failed', error)
    } finally {
      this.exclusive = false
      this.pump()
    }
  }

  /** A batch starting with guarded writes: one transaction, its conditional writes first. */
  private async sendGuarded(): Promise<void> {
    const batch = this.takeBatch(true)
    if (batch.length === 0) return
    const flight: Flight = { batch, seq: this.guard.seq + 1, sentAt: performance.now(), behind: this.inFlight.length, keyTaken: this.separateDuplicateClaims(batch), abandoned: false, asideGeneration: this.asideGeneration, asideActive: this.aside.size > 0 }
    this.recordQueueWait(flight)
    let result: BatchResult
    try {
      result = await this.execute(() =>
        this.writerDb.transaction(async (tx) => {
          await this.runGuardedWrites(tx, batch)
          return readResult(await queryText<Record<string, string | null>>(tx, this.batchStatement(flight)))
        }),
      )
    } catch (error) {
      if (error instanceof GuardsRefusedError) {
        this.refuseGuarded(flight, error.refused)
        return
      }
      if (isOperationFault(error)) {
        this.inFlight.unshift(flight)
        this.isolateFailure(error)
        return
      }
      this.failBatches([flight], error)
      return
    }
    this.guard = { ...this.guard, seq: flight.seq }
    this.settle(flight, result)
  }

  private async runGuardedWrites(tx: Transaction, batch: Queued[]): Promise<void> {
    const refused = new Map<Queued, ApiError>()
    for (const item of batch) {
      for (const guarded of item.op.guardedWrites ?? []) {
        if (await guarded.write(tx)) continue
        refused.set(item, guarded.refusal())
        break
      }
    }
    if (refused.size > 0) throw new GuardsRefusedError(refused)
  }

  /**
   * Undoes and refuses the operations that lost a guarded write; the rest of the batch goes back to
   * the head of the queue (and can be withdrawn again). Undoing a reservation only returns money to
   * where it came from, so the decisions of the operations behind it stay valid.
   */
  private refuseGuarded(flight: Flight, refused: Map<Queued, ApiError>): void {
    const retried = flight.batch.filter((item) => !refused.has(item))
    for (const item of [...flight.batch].reverse()) if (refused.has(item)) this.undo(item)
    this.queue.unshift(...retried)
    for (const item of retried) this.waiting.set(item.op, item)
    for (const [item, error] of refused) item.reject(error)
    // A second claim of a key within the batch was undone when the batch was built: it loses to the
    // first claim, which is retried, and is not queued again.
    this.rejectKeyTaken(flight.keyTaken)
  }

  private rejectKeyTaken(items: Queued[]): void {
    for (const item of items) item.reject(new IdempotencyKeyTaken(item.op.idempotencyRecord!.orgId, item.op.idempotencyRecord!.key))
  }

  /**
   * A key claimed twice in one batch: one statement cannot write a row twice, and the second claim
   * loses anyway. Such operations leave the batch (undone) and are refused once it is answered.
   */
  private separateDuplicateClaims(batch: Queued[]): Queued[] {
    const seen = new Set<string>()
    const keyTaken: Queued[] = []
    for (let index = 0; index < batch.length; index++) {
      const record = batch[index]!.op.idempotencyRecord
      if (record === undefined) continue
      const id = recordId(record.orgId, record.key)
      if (!seen.has(id)) {
        seen.add(id)
        continue
      }
      keyTaken.push(batch[index]!)
      batch.splice(index, 1)
      index -= 1
    }
    for (const item of [...keyTaken].reverse()) this.undo(item)
    return keyTaken
  }

  /** Gives back an operation's reservation in memory (balances and whatever `reserve` did). */
  private undo(item: Queued): void {
    const undo = [...item.deltas.values()].map((delta) => ({ ...delta, available: -delta.available, held: -delta.held, inFlight: -delta.inFlight }))
    this.balances.apply(undo)
    item.op.revert?.()
  }

  /**
   * The batch as one statement: each table is one data-modifying CTE reading its rows from a jsonb
   * parameter of its own (`jsonParameter`; Postgres parses each array once, where extracting every
   * part from one large document cost about a tenth more Postgres CPU per authorization in
   * `bench/batch-cost.ts`), the order guard's figures are `input`, the balances are updated by
   * adding the batch's deltas (Postgres adds them to
   * what it holds, so its own checks, no negative customer bucket and total = available + held +
   * in flight, judge the real result), and the order guard moves from this batch's predecessor to
   * it or the statement refuses itself. Operations whose idempotency claim finds the key held are
   * left out of every part and reported back.
   */
  private batchStatement(flight: Flight, asideOps?: LedgerOperation[]): TextStatement {
    const ops = asideOps ?? flight.batch.map((item) => item.op)
    const claims = rowsOf(ops, (op) => (op.idempotencyRecord ? [op.idempotencyRecord] : undefined))
    const filtered = claims.length > 0
    const values: Record<string, unknown> = {
      input: { writer: this.guard.writerId, seq: flight.seq, prev: flight.seq - 1, at: new Date().toISOString() },
    }
    const parts: string[] = []
    // What decides the statement's text, each a string built once and reused: the text is looked up
    // by these, and assembled from `parts` only the first time.
    const key: string[] = [filtered ? 'filtered' : 'unfiltered', asideOps === undefined ? 'ordered' : 'aside']
    const add = <Table extends PgTable>(name: string, table: Table, entries: Array<{ row: Table['$inferInsert']; op: number }>, tail?: string) => {
      if (entries.length === 0) return
      const part = insertFromJson(
        table,
        entries.map((entry) => entry.row),
        jsonParameter(name),
        filtered ? { tail, ops: entries.map((entry) => entry.op), opFilter: NOT_LOST } : { tail },
      )
      values[name] = part.rows
      key.push(part.text)
      parts.push(`${name} as (${part.text})`)
    }
    if (filtered) {
      const claimed = claimParts(claims.map((entry) => ({ record: entry.row, op: entry.op })))
      values.claims = claimed.claims
      key.push(claimed.text)
      parts.push(...claimed.parts)
    }
    // A bundle committed aside is not in the writer's order: its guard always passes.
    if (asideOps !== undefined) parts.push('guard as (select 1 as seq)')
    else parts.push(
      `guard as (insert into ledger_writer_sequences (writer_id, seq, updated_at)
        select j ->> 'writer', (j ->> 'seq')::bigint, (j ->> 'at')::timestamptz from input
        on conflict (writer_id) do update set seq = excluded.seq, updated_at = excluded.updated_at
        where ledger_writer_sequences.seq = (select (j ->> 'prev')::bigint from input)
        returning seq)`,
    )
    add('movements', ledgerMovements, movementRows(ops))
    values.balances = asideOps === undefined ? this.balanceDeltas(flight.batch, filtered) : this.balanceDeltas([{ deltas: asideDeltas(asideOps) }], false)
    parts.push(filtered ? BALANCE_DELTAS_PER_OPERATION : BALANCE_DELTAS)
    parts.push(BALANCE_WRITES)
    add('holds', holds, lastStatePerId(rowsOf(ops, (op) => op.holds)), HOLD_TAIL)
    add('transfers', transfers, rowsOf(ops, (op) => op.transfers))
    // A payment that records its reservation is created by this commit (its hold is never added to
    // a row written before): a plain insert, which a second row with its key fails loudly. Only
    // payments moving to a new state are upserted; an upsert costs Postgres a probe of the key and
    // a speculative insertion per row (docs/architecture.md, "Group commit").
    const created = rowsOf(ops, (op) => (op.recordedByPayment ? op.payments : undefined))
    const moved = lastStatePerId(rowsOf(ops, (op) => (op.recordedByPayment ? undefined : op.payments)))
    assertCreatedOnce(created, moved)
    add('authorizations', payments, created)
    add('payments', payments, moved, PAYMENT_TAIL)
    // A new arrival conflicts on its id only when it is being moved on; the (network, txHash,
    // address) key refuses a second row for the same observation, failing the commit loudly.
    add(
      'arrivals',
      chainArrivals,
      lastStatePerId(rowsOf(ops, (op) => op.chainArrivals)),
      ARRIVAL_TAIL,
    )
    add('deposits', deposits, lastStatePerId(rowsOf(ops, (op) => op.deposits)), DEPOSIT_TAIL)
    // Events go in the same statement as the change they describe (the outbox), in queue order.
    add('events', events, rowsOf(ops, (op) => op.events))
    const answers = rowsOf(ops, (op) => (op.idempotencyAnswer ? [op.idempotencyAnswer] : undefined))
    if (answers.length > 0) {
      key.push('answers')
      values.answers = answers.map(({ row, op }) => ({ org_id: row.orgId, key: row.key, response_status: row.responseStatus, response_body: row.responseBody, [OP_COLUMN]: op }))
      parts.push(
        `answers as (update idempotency_records r set response_status = a.response_status, response_body = a.response_body
          from jsonb_to_recordset(${jsonParameter('answers')}) as a(org_id text, key text, response_status integer, response_body text, ${OP_COLUMN} integer)
          where r.org_id = a.org_id and r.key = a.key${filtered ? ` and a.${NOT_LOST}` : ''})`,
      )
    }
    const lostRows = filtered ? `\nunion all select 'lost', op::text, null, null, null, null, null, null, null from lost` : ''
    const text = BATCH_TEXTS.numbered(
      key,
      () => `with input as (select ${jsonParameter('input')} as j), ${parts.join(',\n')}
select 'balance' as part, org_id, account_id, asset, kind, available::text, held::text, in_flight::text, total::text from created
union all select 'balance', org_id, account_id, asset, kind, available::text, held::text, in_flight::text, total::text from updated${lostRows}
union all select 'refused', kassa_refuse('ledger writer: batch ' || (select j ->> 'seq' from input) || ' of ' || (select j ->> 'writer' from input) || ' arrived out of order; an earlier batch did not commit'), null, null, null, null, null, null, null
  where not exists (select 1 from guard)`,
    )
    return statementWith(text, values)
  }

  /** The batch's balance deltas: summed per balance, or per operation when claims may leave some out. */
  private balanceDeltas(batch: Array<Pick<Queued, 'deltas'>>, perOperation: boolean): Array<Record<string, unknown>> {
    const toRow = (delta: BalanceDelta, op?: number) => ({
      org_id: delta.orgId,
      account_id: delta.accountId,
      asset: delta.asset,
      kind: delta.kind,
      available: delta.available.toString(),
      held: delta.held.toString(),
      in_flight: delta.inFlight.toString(),
      ...(op === undefined ? {} : { [OP_COLUMN]: op }),
    })
    if (perOperation) return batch.flatMap((item, index) => [...item.deltas.values()].map((delta) => toRow(delta, index)))
    const combined = new Map<string, BalanceDelta>()
    for (const item of batch) addDeltas(combined, item.deltas)
    return [...combined.values()].map((delta) => toRow(delta))
  }

  /**
   * After a commit, Postgres must hold exactly memory minus what is still in flight behind this
   * batch or queued. A mismatch is a bug: it is reported loudly and memory takes Postgres' values
   * (the database is the truth; its checks already refused any row breaking the invariant).
   */
  private checkCommitPoint(written: HotBalance[]): void {
    const pending = new Map<string, BalanceDelta>()
    for (const flight of this.inFlight) if (!flight.abandoned) for (const item of flight.batch) addDeltas(pending, item.deltas)
    for (const item of this.queue) if (!item.withdrawn) addDeltas(pending, item.deltas)
    // total = available + held + in_flight of each row is a check constraint: Postgres refused the
    // batch before commit if it did not hold.
    for (const row of written) {
      const key = balanceKey(row.orgId, row.accountId, row.asset)
      if (this.takeDatabaseValues(key, row, pending)) continue
      this.invariantBreaches += 1
      console.error(`ledger: INVARIANT BREACH: memory of ${row.accountId} ${row.asset} differed from the database after a commit; took the database's values`)
    }
  }

  /** Between batches (nothing in flight): failed batches' balances, then callers' resyncs, read back. */
  private async reconcile(): Promise<void> {
    const touched = this.recovering
    this.recovering = undefined
    if (touched !== undefined) {
      this.reconciling = true
      try {
        await this.readBack(touched)
      } catch (error) {
        // The database failed again: callers with a deadline keep answering at once for a while.
        this.failedAt = performance.now()
        logFailure('ledger.read-back', 'ledger: could not read balances back after a failed commit; memory keeps the undone values', error)
      } finally {
        this.reconciling = false
      }
    }
    for (const request of this.resyncs.splice(0)) await this.readBack(request.touched).then(request.resolve, request.reject)
  }

  private async readBack(touched: Map<string, BalanceDelta>): Promise<void> {
    if (touched.size === 0) return
    const accountIds = [...new Set([...touched.values()].map((delta) => delta.accountId))]
    const rows: HotBalance[] = await this.db.select().from(ledgerBalances).where(inArray(ledgerBalances.accountId, accountIds))
    const pending = new Map<string, BalanceDelta>()
    for (const item of this.queue) if (!item.withdrawn) addDeltas(pending, item.deltas)
    for (const [key, delta] of touched) {
      const stored = rows.find((row) => balanceKey(row.orgId, row.accountId, row.asset) === key)
      const database: HotBalance = stored ?? { ...delta, available: 0n, held: 0n, inFlight: 0n, total: 0n }
      if (!this.takeDatabaseValues(key, database, pending)) console.error(`ledger: memory of ${delta.accountId} ${delta.asset} differed from the database; took the database's values`)
    }
  }

  /**
   * Memory must equal the database's row plus what is still on its way (`pending`). Answers whether
   * it did; if not, memory takes those values.
   */
  private takeDatabaseValues(key: string, database: HotBalance, pending: Map<string, BalanceDelta>): boolean {
    const expected = withDelta(database, pending.get(key))
    const memory = this.balances.getByKey(key)
    if (memory !== undefined && memory.available === expected.available && memory.held === expected.held && memory.inFlight === expected.inFlight) return true
    this.balances.load(expected)
    return false
  }
}

/** The batch's rows of `ledger_movements`: one per operation, but for reservations their payment records. */
function movementRows(ops: LedgerOperation[]): Array<{ row: typeof ledgerMovements.$inferInsert; op: number }> {
  const rows: Array<{ row: typeof ledgerMovements.$inferInsert; op: number }> = []
  for (let index = 0; index < ops.length; index++) {
    const op = ops[index]!
    if (op.recordedByPayment !== true) rows.push({ row: movementRow(op), op: index })
  }
  return rows
}

/** An operation's movement with its legs, in posting order (leg i is `amounts[i]` of `assets[i]` on `buckets[i]` of `accounts[i]`). */
function movementRow(op: LedgerOperation & OwnMovement): typeof ledgerMovements.$inferInsert {
  const count = op.postings.length
  const accounts = new Array<string>(count)
  const buckets = new Array<string>(count)
  const assets = new Array<string>(count)
  const amounts = new Array<string>(count)
  for (let leg = 0; leg < count; leg++) {
    const posting = op.postings[leg]!
    accounts[leg] = posting.accountId
    buckets[leg] = posting.bucket
    assets[leg] = posting.asset
    amounts[leg] = posting.amountMinor.toString()
  }
  return { id: op.movementId, orgId: op.orgId, kind: op.movementKind, reference: op.reference, createdAt: op.createdAt, accounts, buckets, assets, amounts }
}

/** Adds an operation's deltas (as reserved, one per balance) into a running sum per balance. */
function addDeltas(into: Map<string, BalanceDelta>, deltas: Map<string, BalanceDelta>): void {
  for (const [key, delta] of deltas) {
    const sum = into.get(key)
    if (sum === undefined) into.set(key, { ...delta })
    else {
      sum.available += delta.available
      sum.held += delta.held
      sum.inFlight += delta.inFlight
    }
  }
}

/** A balance plus deltas still on their way. */
function withDelta(balance: HotBalance, delta: BalanceDelta | undefined): HotBalance {
  if (delta === undefined) return balance
  return {
    ...balance,
    available: balance.available + delta.available,
    held: balance.held + delta.held,
    inFlight: balance.inFlight + delta.inFlight,
    total: balance.total + delta.available + delta.held + delta.inFlight,
  }
}

function newWriterId(): string {
  return `wr_${crypto.randomUUID().replaceAll('-', '')}`
}

function readResult(rows: Array<Record<string, string | null>>): BatchResult {
  const written: HotBalance[] = []
  const lostOps = new Set<number>()
  for (const row of rows) {
    if (row.part === 'lost') {
      lostOps.add(Number(row.org_id))
      continue
    }
    assert(row.part === 'balance', `unexpected part ${row.part} in a batch's answer`)
    written.push({
      orgId: row.org_id!,
      accountId: row.account_id!,
      asset: row.asset!,
      kind: row.kind as HotBalance['kind'],
      available: BigInt(row.available!),
      held: BigInt(row.held!),
      inFlight: BigInt(row.in_flight!),
      total: BigInt(row.total!),
    })
  }
  return { written, lostOps }
}

/** Rows that move to a new state are upserted: the last state queued for an id is the one written. */
/** The writer's batch statements, numbered once per combination of parts and row shapes. */
const BATCH_TEXTS = new StatementTexts()
const HOLD_TAIL = upsertTail('id', ['state', 'captured_amount', 'transfer_id', 'closed_at'])
const PAYMENT_TAIL = upsertTail('org_id, id', ['state', 'failure_code', 'captured_amount', 'closed_at'])
const ARRIVAL_TAIL = upsertTail('id', ['state', 'disposition', 'account_id', 'deposit_id', 'finalized_at', 'resolved_at', 'resolution_note'])
const DEPOSIT_TAIL = upsertTail('id', ['state', 'received_amount', 'amount_match', 'arrival_id', 'tx_hash', 'arrived_at', 'completed_at'])


/** The batch's deltas, one row per balance (no operation can be left out). */
const BALANCE_DELTAS = `d as (
  select * from jsonb_to_recordset(${jsonParameter('balances')})
    as d(org_id text, account_id text, asset text, kind text, available numeric, held numeric, in_flight numeric))`

/** The batch's deltas per operation, summed without the operations that lost their claim. */
const BALANCE_DELTAS_PER_OPERATION = `d as (
  select org_id, account_id, asset, kind, sum(available) as available, sum(held) as held, sum(in_flight) as in_flight
  from jsonb_to_recordset(${jsonParameter('balances')})
    as x(org_id text, account_id text, asset text, kind text, available numeric, held numeric, in_flight numeric, ${OP_COLUMN} integer)
  where ${NOT_LOST}
  group by org_id, account_id, asset, kind)`

/**
 * Existing rows are updated by adding the deltas; rows seen for the first time are inserted with
 * the deltas as their values. Both parts read one snapshot, so each row goes to exactly one of them.
 */
const BALANCE_WRITES = `created as (
  insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
  select d.org_id, d.account_id, d.asset, d.kind, d.available, d.held, d.in_flight, d.available + d.held + d.in_flight, (select (j ->> 'at')::timestamptz from input)
  from d
  where not exists (select 1 from ledger_balances b where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset)
  returning org_id, account_id, asset, kind, available, held, in_flight, total
),
updated as (
  update ledger_balances as b set
    available = b.available + d.available, held = b.held + d.held, in_flight = b.in_flight + d.in_flight,
    total = b.total + d.available + d.held + d.in_flight, updated_at = (select (j ->> 'at')::timestamptz from input)
  from d
  where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset
  returning b.org_id, b.account_id, b.asset, b.kind, b.available, b.held, b.in_flight, b.total
)`
