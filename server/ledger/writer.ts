/*
 * The group-commit writer's pipeline: queue → batches in flight → answers in order → settle or
 * fail. It is one piece past 400 lines because its parts share one state and its invariants span
 * them all: a batch commits only behind every batch sent before it (the order guard), answers are
 * handled in the order sent, and nothing is sent while memory is read back after a failure; split
 * further, each part would reach into the others' state. What stands apart is in files of its own:
 * the batch statement (`batch-statement.ts`), the queue (`writer-queue.ts`), the pace and its marks
 * (`writer-pace.ts`), reconciliation with Postgres (`reconcile.ts`), what bisection treats as an
 * operation's fault (`bisect.ts`), bundles committed aside (`aside.ts`) and the fence (`fence.ts`).
 */
import type { TextStatement } from '../../db/bulk.ts'
import { queryText, type Database, type Transaction } from '../../db/client.ts'
import { assert } from '../lib/assert.ts'
import type { ApiError } from '../lib/errors.ts'
import { logFailure } from '../lib/log.ts'
import { LatencyHistogram } from '../lib/histogram.ts'
import { PROCESS_CLOCK, type MonotonicClock } from '../lib/monotonic-clock.ts'
import { recordId } from '../platform/idempotency.ts'
import { IdempotencyKeyTaken } from '../platform/idempotency-in-commit.ts'
import { batchStatement, readResult, type BatchResult } from './batch-statement.ts'
import { isOperationFault, markHalves } from './bisect.ts'
import { AsideCommits } from './aside.ts'
import { checkFence, fenceRefusal, isFenceRefusal, orgsOf, type CommitFence } from './fence.ts'
import { addDeltas, type BalanceDelta, type HotBalances } from './hot-balances.ts'
import { CommitFailedError, OperationWithdrawn, type BatchTiming, type GuardedWrite, type LedgerOperation } from './operation.ts'
import { BalanceReconciler } from './reconcile.ts'
import { WriterPace } from './writer-pace.ts'
import { OperationQueue, type Queued } from './writer-queue.ts'
import type { WriteSetRegistry } from './write-sets.ts'

export type { BatchTiming, GuardedWrite, IdempotencyAnswer, LedgerOperation } from './operation.ts'
export { CommitFailedError, IdempotencyKeyTaken, OperationWithdrawn }

/** Some operations of a batch lost a guarded write; the transaction was rolled back and is retried without them. */
class GuardsRefusedError extends Error {
  constructor(readonly refused: Map<Queued, ApiError>) {
    super('guarded writes refused')
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
  /** A precondition every commit checks in its own statement or transaction (see `CommitFence`); none when not given. */
  fence?: CommitFence
  /**
   * The clock batch latencies, deadlines, the fail-fast window and the stall watch are read on: the
   * process's by default. Operations' `deadline`s are on it too.
   */
  clock?: MonotonicClock
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
  /** `AsideCommits.generation` when it was sent, and whether a bundle was committing aside then. */
  asideGeneration?: number
  asideActive?: boolean
  /** Its answer, once its promise settled; handled when every batch sent before it has been. */
  answer?: { rows: Array<Record<string, string | null>> | undefined; error: unknown }
}

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
  private readonly queue = new OperationQueue()
  private resyncs: Array<{ touched: Map<string, BalanceDelta>; resolve: () => void; reject: (error: unknown) => void }> = []
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
  /** Memory checked against Postgres at each commit point and read back after a failure. */
  private readonly reconciler: BalanceReconciler
  /** Recent batch latency and pace, and when the last batch failed (`expectedWaitMs`, `healthy`). */
  private readonly pace = new WriterPace()
  /** Memory is being read back from Postgres after a failed batch: nothing is sent until it ends. */
  private reconciling = false
  /** Due when the oldest batch in flight would count as stuck (see `watchStalls`). */
  private stallWatch: unknown
  /** When `stallWatch` fires (on the writer's clock). */
  private stallWatchAt = 0
  private readonly clock: MonotonicClock
  /** Bundles committing beside the batches (`commitAside`). */
  private readonly aside: AsideCommits
  constructor(
    private readonly db: Database,
    private readonly writerDb: Database,
    private readonly balances: HotBalances,
    private readonly options: WriterOptions,
    /** What modules commit besides movements and balances (see `WriteSet`). */
    readonly writeSets: WriteSetRegistry,
  ) {
    assert(options.pipelineDepth >= 1, 'the writer sends at least one batch at a time')
    this.clock = options.clock ?? PROCESS_CLOCK
    this.reconciler = new BalanceReconciler(db, balances)
    this.aside = new AsideCommits({
      db,
      balances,
      fence: options.fence,
      writeSets,
      now: () => this.clock.now(),
      failed: (deltas) => {
        const touched = this.recovering ?? new Map<string, BalanceDelta>()
        for (const [key, delta] of deltas) touched.set(key, delta)
        this.recovering = touched
        this.pump()
      },
      changed: () => this.pump(),
    })
  }

  /** Commit-point checks that found memory and Postgres apart (a bug); memory took Postgres' values. */
  get invariantBreaches(): number {
    return this.reconciler.invariantBreaches
  }

  /** Reserves in memory (already done by the caller) and resolves once the commit is durable. */
  enqueue(op: LedgerOperation, deltas: Map<string, BalanceDelta>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const item: Queued = { op, deltas, withdrawn: false, queuedAt: this.clock.now(), resolve, reject }
      this.queue.push(item)
      this.pump()
    })
  }

  /** See `AsideCommits.commit`. */
  commitAside(ops: LedgerOperation[], guardedWrites: GuardedWrite[], deltas: Map<string, BalanceDelta>): Promise<void> {
    return this.aside.commit(ops, guardedWrites, deltas)
  }

  /** See `Ledger.withdraw`. */
  withdraw(op: LedgerOperation): boolean {
    const item = this.queue.withdraw(op)
    if (item === undefined) return false
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
    return this.pace.expectedWaitMs(this.queue.size, this.queue.size === 0 && this.inFlight.length === 0)
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
    const now = this.clock.now()
    if (this.pace.failingNow(now)) return false
    // After a failed batch nothing is sent before memory has been read back from Postgres, and
    // while the database refuses, that read waits on the driver's reconnects.
    if (this.recovering !== undefined || this.reconciling) return false
    const oldest = this.inFlight[0]
    // Stuck from the mark on, as the stall watch counts it.
    return oldest === undefined || now < oldest.sentAt + this.stalledAfterMs()
  }

  /**
   * Whether a batch may go out behind the ones in flight: enough operations wait for it
   * (`pipelineMinOperations`), and the oldest in flight is not overdue. A batch out much longer than
   * batches take may be stuck; what is sent behind it then only waits with it, past its callers'
   * deadlines, where queued it could still be withdrawn (`watchStalls`).
   */
  private worthPipelining(): boolean {
    if (this.queue.size < this.options.pipelineMinOperations) return false
    const oldest = this.inFlight[0]
    return oldest === undefined || this.clock.now() - oldest.sentAt <= this.overdueAfterMs()
  }

  /** How long a batch may be in flight before nothing more is pipelined behind it (see `WriterPace`). */
  overdueAfterMs(): number {
    return this.pace.overdueAfterMs()
  }

  /** How long a batch may be in flight before it counts as stuck (see `WriterPace`). */
  stalledAfterMs(): number {
    return this.pace.stalledAfterMs()
  }

  /** Recent batch latency (moving average). */
  get batchMs(): number {
    return this.pace.batchMs
  }

  /**
   * Once the oldest batch in flight has been out long enough to count as stuck, the queued
   * operations that have a deadline (authorizations) are withdrawn at once, rather than each waiting
   * behind the stuck batch until its own deadline: nothing queued behind it can commit before the
   * stuck batch does. Their callers decline at once, as those arriving after the stall was noticed
   * already do (`healthy`). Operations without a deadline stay queued. One timer, re-armed for the
   * next oldest batch when it fires, and set again earlier only when the oldest batch's mark falls
   * before it (the pace quickened after a slow spell: a timer left at the slow spell's mark would
   * notice a stall late). In steady work each mark falls after the one set, so a send costs one
   * comparison.
   */
  private watchStalls(): void {
    const oldest = this.inFlight[0]
    if (oldest === undefined) return
    const markAt = oldest.sentAt + this.stalledAfterMs()
    if (this.stallWatch !== undefined) {
      if (this.stallWatchAt <= markAt) return
      this.clock.clear(this.stallWatch)
    }
    this.stallWatchAt = markAt
    this.stallWatch = this.clock.set(() => {
      this.stallWatch = undefined
      if (this.inFlight[0] !== oldest) {
        this.watchStalls()
        return
      }
      if (this.clock.now() < oldest.sentAt + this.stalledAfterMs()) {
        // The recent pace slowed meanwhile and moved the mark: look again then.
        this.watchStalls()
        return
      }
      for (const item of [...this.queue.live()]) if (item.op.deadline !== undefined) this.withdraw(item.op)
    }, Math.max(0, markAt - this.clock.now()))
  }

  /** Resolves when nothing is queued, in flight or being reconciled. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve()
    return new Promise((resolve) => this.idleWaiters.push(resolve))
  }

  pendingCount(): number {
    return this.queue.size
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
    return this.queue.empty && this.inFlight.length === 0 && !this.exclusive && this.resyncs.length === 0 && this.recovering === undefined
  }

  /** Sends what can be sent now; called whenever something is queued or a batch is answered. */
  private pump(): void {
    if (this.pumping) return
    this.pumping = true
    try {
      while (!this.exclusive) {
        if (this.recovering !== undefined || this.resyncs.length > 0) {
          // Read back only with nothing on its way, bundles committing aside included.
          if (this.inFlight.length === 0 && !this.aside.active) void this.runExclusive(() => this.reconcile())
          break
        }
        const head = this.queue.head()
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

  /**
   * Takes the next batch off the queue; from here on its operations can no longer be withdrawn. A
   * pipelined batch stops before the next operation with guarded writes (those go in a transaction).
   */
  private takeBatch(guarded: boolean): Queued[] {
    // Behind batches in flight, this one commits about a batch's latency after they do. An idle
    // writer sends at once and only an operation already past its deadline is left out: the pace
    // of past batches may be stale (one slow spell can leave it above the whole budget), and with
    // nothing sent it would never be measured again, so every operation would be withdrawn for good.
    const latestStart = this.clock.now() + (this.inFlight.length > 0 ? this.batchMs : 0)
    // One that would commit after its caller stopped waiting is withdrawn now rather than written late.
    return this.queue.takeBatch(this.options.groupCommit ? this.options.batchMax : 1, guarded, latestStart, (op) => this.withdraw(op))
  }

  /** Sends a batch as one pipelined statement; its answer is handled in order by `answered`. */
  private send(batch: Queued[]): void {
    const flight = this.newFlight(batch)
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

  /** A batch about to be sent, next in the writer's order; a key claimed twice in it leaves it (`separateDuplicateClaims`). */
  private newFlight(batch: Queued[]): Flight {
    return { batch, seq: this.guard.seq + 1, sentAt: this.clock.now(), behind: this.inFlight.length, keyTaken: this.separateDuplicateClaims(batch), abandoned: false, asideGeneration: this.aside.generation, asideActive: this.aside.active }
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
    if (!flight.asideActive && flight.asideGeneration === this.aside.generation) this.reconciler.checkCommitPoint(result.written, this.pendingDeltas())
    const now = this.clock.now()
    this.pace.committed(batch.length - lost.length, flight.sentAt, now)
    this.commitLatency.record(now - flight.sentAt)
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
      markHalves(batch)
      again.push(...batch)
    }
    for (const flight of behind) again.push(...flight.batch)
    this.queue.putBack(again)
    // A key's second claim in one batch lost to the first when the batch was built, as ever.
    this.rejectKeyTaken([failed!, ...behind].flatMap((flight) => flight.keyTaken))
  }

  private failBatches(flights: Flight[], error: unknown): void {
    const queued = this.queue.takeAll()
    this.pace.failed(this.clock.now())
    const failed = [...flights.flatMap((flight) => [...flight.batch, ...flight.keyTaken]), ...queued]
    logFailure('ledger.batch', `ledger: a batch of ${flights[0]!.batch.length} operation(s) failed; failing ${failed.length} uncommitted operation(s)`, error)
    // Undo in reverse order of reservation, so each undo sees the state its reservation left.
    for (const item of [...failed].reverse()) this.undo(item)
    const touched = this.recovering ?? new Map<string, BalanceDelta>()
    for (const item of failed) for (const [key, delta] of item.deltas) touched.set(key, delta)
    this.recovering = touched
    // A new guard row: whatever became of the failed batches, the next one starts a fresh sequence.
    this.guard = { writerId: newWriterId(), seq: 0 }
    // A false commit fence refused the batch: this instance may no longer write for its
    // organizations, and another may; the caller is told so, to retry there.
    const failure = isFenceRefusal(error) ? fenceRefusal() : new CommitFailedError(error)
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
    const flight = this.newFlight(batch)
    this.recordQueueWait(flight)
    let result: BatchResult
    try {
      result = await this.execute(() =>
        this.writerDb.transaction(async (tx) => {
          await checkFence(tx, this.options.fence, orgsOf(batch.map((item) => item.op)))
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
    this.queue.putBack(retried)
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

  /** A batch's statement (`batch-statement.ts`). (The batch-cost benchmark wraps this to capture what is sent.) */
  private batchStatement(flight: Flight): TextStatement {
    return batchStatement(
      { ops: flight.batch.map((item) => item.op), deltas: flight.batch.map((item) => item.deltas), order: { writerId: this.guard.writerId, seq: flight.seq } },
      this.writeSets,
      this.options.fence,
    )
  }

  /** Reads balances back from Postgres into memory, what is queued counting as on its way. (Tests replace it to fail the read.) */
  private readBack(touched: Map<string, BalanceDelta>): Promise<void> {
    return this.reconciler.readBack(touched, () => this.queuedDeltas())
  }

  /** What is still on its way behind a committed batch: the batches in flight and the operations queued. */
  private pendingDeltas(): Map<string, BalanceDelta> {
    const pending = new Map<string, BalanceDelta>()
    for (const flight of this.inFlight) if (!flight.abandoned) for (const item of flight.batch) addDeltas(pending, item.deltas)
    return this.queuedDeltas(pending)
  }

  private queuedDeltas(into = new Map<string, BalanceDelta>()): Map<string, BalanceDelta> {
    return this.queue.addDeltasTo(into)
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
        this.pace.failed(this.clock.now())
        logFailure('ledger.read-back', 'ledger: could not read balances back after a failed commit; memory keeps the undone values', error)
      } finally {
        this.reconciling = false
      }
    }
    for (const request of this.resyncs.splice(0)) await this.readBack(request.touched).then(request.resolve, request.reject)
  }

}

function newWriterId(): string {
  return `wr_${crypto.randomUUID().replaceAll('-', '')}`
}
