import { and, eq, inArray, sql } from 'drizzle-orm'
import type { IdempotencyRow } from '../platform/idempotency.ts'
import { bulkInsert, upsertTail } from '../../db/bulk.ts'
import { queryPrepared, type Database, type Transaction } from '../../db/client.ts'
import { chainArrivals, deposits, events, holds, idempotencyRecords, ledgerBalances, ledgerMovements, ledgerPostings, payments, transfers } from '../../db/schema/index.ts'
import { assert } from '../lib/assert.ts'
import { ApiError } from '../lib/errors.ts'
import { insertRecords, recordId } from '../platform/idempotency.ts'
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
export interface LedgerOperation {
  orgId: string
  movementId: string
  movementKind: string
  reference: string
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
  /** Memory to settle once the commit is durable (forget a closed hold). */
  committed?: () => void
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
  resolve: () => void
  reject: (error: unknown) => void
}

export interface WriterOptions {
  groupCommit: boolean
  /** Upper bound on operations per transaction; keeps statements under Postgres' parameter limit. */
  batchMax: number
  /**
   * Send a batch's statements without waiting for each answer (postgres.js pipelines them on the
   * transaction's connection; Postgres still runs them in order). A batch then costs about two
   * round trips (the statements, then COMMIT) instead of one per statement. Off for PGlite, which
   * runs in process and has no round trips to save.
   */
  pipeline: boolean
}

/** A statement not yet sent: the batch decides whether to pipeline it or await it in turn. */
type Statement = () => PromiseLike<unknown>

/**
 * A batch's statements do not depend on each other (the driver may put them on the wire in any
 * order), so with pipelining they are all sent before any answer is awaited; the first failure
 * fails the batch.
 */
async function runStatements(statements: Statement[], pipeline: boolean): Promise<void> {
  if (pipeline) await Promise.all(statements.map((statement) => statement()))
  else for (const statement of statements) await statement()
}

/**
 * Holds and payments are opened and closed by different operations, possibly in one batch; the
 * last state queued for an id is the one written (queue order is decision order).
 */
function lastStatePerId<Row extends { id: string }>(rows: Row[]): Row[] {
  const latest = new Map<string, Row>()
  for (const row of rows) latest.set(row.id, row)
  return [...latest.values()]
}

/** The operation was withdrawn before it was written: nothing of it was applied. */
export class OperationWithdrawn extends Error {
  constructor() {
    super('The operation was withdrawn before it was written')
  }
}

/** The operation's Idempotency-Key is held by an earlier request: nothing of it was applied. */
export class IdempotencyKeyTaken extends Error {
  constructor(
    readonly orgId: string,
    readonly key: string,
  ) {
    super(`Idempotency-Key ${key} is already held`)
  }
}

/** Distinguishes "the database refused" from a business rule; callers answer it as internal. */
export class CommitFailedError extends ApiError {
  constructor(cause: unknown) {
    super('internal', 'The ledger could not commit this operation; nothing was applied')
    this.cause = cause
  }
}

/**
 * The group-commit writer: one loop takes whatever has queued (up to `batchMax`, or exactly one
 * with group commit off) and writes it in one transaction. Callers are resolved only after COMMIT.
 * A failed commit fails that batch and everything queued behind it (they were decided against
 * reservations that are now void), undoes their reservations and reconciles memory with Postgres.
 */
export class GroupCommitWriter {
  private queue: Queued[] = []
  private resyncs: Array<{ touched: Map<string, BalanceDelta>; resolve: () => void; reject: (error: unknown) => void }> = []
  /** Queued operations by identity, so one can be withdrawn without searching the queue. */
  private readonly waiting = new Map<LedgerOperation, Queued>()
  private running = false
  private idleWaiters: Array<() => void> = []
  committedOperations = 0
  committedBatches = 0
  /** Recent transaction time and operations per millisecond (moving averages), for `expectedWaitMs`. */
  private batchMs = 0
  private operationsPerMs = 0

  constructor(
    private readonly db: Database,
    private readonly balances: HotBalances,
    private readonly options: WriterOptions,
  ) {}

  /** Reserves in memory (already done by the caller) and resolves once the commit is durable. */
  enqueue(op: LedgerOperation, deltas: Map<string, BalanceDelta>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const item: Queued = { op, deltas, withdrawn: false, resolve, reject }
      this.queue.push(item)
      this.waiting.set(op, item)
      if (!this.running) void this.run()
    })
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
   * queued ahead of it divided by the recent rate, plus one transaction. Callers with a deadline
   * (an authorization) decline at once when it cannot be met, instead of queueing work that would
   * only be withdrawn: under overload the writer keeps approving at its capacity.
   */
  expectedWaitMs(): number {
    if (this.operationsPerMs === 0) return 0
    return this.waiting.size / this.operationsPerMs + this.batchMs
  }

  private recordPace(operations: number, elapsedMs: number): void {
    const weight = 0.2
    this.batchMs = this.batchMs === 0 ? elapsedMs : this.batchMs * (1 - weight) + elapsedMs * weight
    const rate = operations / Math.max(elapsedMs, 0.1)
    this.operationsPerMs = this.operationsPerMs === 0 ? rate : this.operationsPerMs * (1 - weight) + rate * weight
  }

  /** Takes the next batch off the queue; from here on its operations can no longer be withdrawn. */
  private takeBatch(): Queued[] {
    const batchMax = this.options.groupCommit ? this.options.batchMax : 1
    const batch: Queued[] = []
    const latestStart = performance.now() + this.batchMs
    let taken = 0
    while (batch.length < batchMax && taken < this.queue.length) {
      const item = this.queue[taken]!
      taken += 1
      if (item.withdrawn) continue
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

  /** Resolves when nothing is queued or being written. */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve()
    return new Promise((resolve) => this.idleWaiters.push(resolve))
  }

  pendingCount(): number {
    return this.waiting.size
  }

  private async run(): Promise<void> {
    this.running = true
    try {
      while (this.queue.length > 0 || this.resyncs.length > 0) {
        for (const request of this.resyncs.splice(0)) await this.readBack(request.touched).then(request.resolve, request.reject)
        const batch = this.takeBatch()
        if (batch.length === 0) continue
        const keyTaken: Queued[] = []
        const startedAt = performance.now()
        try {
          await this.db.transaction((tx) => this.writeBatch(tx, batch, keyTaken))
        } catch (error) {
          if (error instanceof GuardsRefusedError) this.refuseGuarded(batch, error.refused)
          else await this.failUncommitted(batch, error)
          continue
        } finally {
          for (const item of keyTaken) item.reject(new IdempotencyKeyTaken(item.op.idempotencyRecord!.orgId, item.op.idempotencyRecord!.key))
        }
        this.recordPace(batch.length, performance.now() - startedAt)
        this.committedBatches += 1
        this.committedOperations += batch.length
        for (const item of batch) {
          item.op.committed?.()
          item.resolve()
        }
      }
    } finally {
      this.running = false
      for (const wake of this.idleWaiters.splice(0)) wake()
    }
  }

  private async writeBatch(tx: Transaction, batch: Queued[], keyTaken: Queued[]): Promise<void> {
    await this.claimIdempotencyKeys(tx, batch, keyTaken)
    if (batch.length === 0) return
    await this.runGuardedWrites(tx, batch)
    const ops = batch.map((item) => item.op)
    let written: HotBalance[] = []
    const balances = this.balanceStatement(tx, batch, (rows) => {
      written = rows
    })
    const statements: Statement[] = [
      () => queryPrepared(tx, bulkInsert(ledgerMovements, ops.map((op) => ({ id: op.movementId, orgId: op.orgId, kind: op.movementKind, reference: op.reference, createdAt: op.createdAt })))),
      () =>
        queryPrepared(
          tx,
          bulkInsert(
            ledgerPostings,
            ops.flatMap((op) =>
              op.postings.map((posting, leg) => ({
                movementId: op.movementId,
                leg,
                orgId: op.orgId,
                accountId: posting.accountId,
                bucket: posting.bucket,
                asset: posting.asset,
                amount: posting.amountMinor,
              })),
            ),
          ),
        ),
      balances,
      ...this.domainStatements(tx, ops),
    ]
    await runStatements(statements, this.options.pipeline)
    this.assertCommitPoint(written)
  }

  /**
   * Inserts the batch's idempotency records (an expired record with the same key is replaced).
   * Operations whose key is held are moved from `batch` to `keyTaken` and their reservations undone
   * before anything else is written, so the rest of the batch, and the commit-point check, never
   * see them.
   */
  private async claimIdempotencyKeys(tx: Transaction, batch: Queued[], keyTaken: Queued[]): Promise<void> {
    const claiming = batch.filter((item) => item.op.idempotencyRecord !== undefined)
    if (claiming.length === 0) return
    const idOf = (row: IdempotencyRow) => recordId(row.orgId, row.key)
    // One statement cannot touch a row twice; a second claim of a key in one batch loses anyway.
    const firstPerKey = new Map<string, IdempotencyRow>()
    for (const item of claiming) if (!firstPerKey.has(idOf(item.op.idempotencyRecord!))) firstPerKey.set(idOf(item.op.idempotencyRecord!), item.op.idempotencyRecord!)
    const won = await insertRecords(tx, [...firstPerKey.values()])
    const winners = new Set([...firstPerKey.values()].filter((row) => won.has(idOf(row))))
    for (let index = batch.length - 1; index >= 0; index--) {
      const item = batch[index]!
      if (item.op.idempotencyRecord === undefined || winners.has(item.op.idempotencyRecord)) continue
      batch.splice(index, 1)
      keyTaken.unshift(item)
      this.undo(item)
    }
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
  private refuseGuarded(batch: Queued[], refused: Map<Queued, ApiError>): void {
    for (const item of [...batch].reverse()) if (refused.has(item)) this.undo(item)
    const retried = batch.filter((item) => !refused.has(item))
    this.queue.unshift(...retried)
    for (const item of retried) this.waiting.set(item.op, item)
    for (const [item, error] of refused) item.reject(error)
  }

  /** Gives back an operation's reservation in memory (balances and whatever `reserve` did). */
  private undo(item: Queued): void {
    const undo = [...item.deltas.values()].map((delta) => ({ ...delta, available: -delta.available, held: -delta.held, inFlight: -delta.inFlight }))
    this.balances.apply(undo)
    item.op.revert?.()
  }

  /**
   * One statement adds the batch's deltas to every touched balance. Existing rows are updated by
   * adding the deltas (not absolute values: Postgres adds them to what it holds, so its own checks,
   * no negative customer bucket, judge the real result); rows seen for the first time are inserted
   * with the deltas as their values, checked the same way. Both parts read one snapshot, so each
   * row goes to exactly one of them.
   */
  private balanceStatement(tx: Transaction, batch: Queued[], read: (rows: HotBalance[]) => void): Statement {
    const combined = new Map<string, BalanceDelta>()
    for (const item of batch) deltasOf(item.op.orgId, item.op.postings, 1n, combined)
    const deltas = [...combined.values()]
    const payload = JSON.stringify(
      deltas.map((delta) => ({
        org_id: delta.orgId,
        account_id: delta.accountId,
        asset: delta.asset,
        kind: delta.kind,
        available: delta.available.toString(),
        held: delta.held.toString(),
        in_flight: delta.inFlight.toString(),
      })),
    )
    const updatedAt = new Date().toISOString()
    return async () => {
      const rows = await queryPrepared<Record<string, string>>(
        tx,
        sql`with d as (
              select * from jsonb_to_recordset(${payload}::jsonb)
                as d(org_id text, account_id text, asset text, kind text, available numeric, held numeric, in_flight numeric)
            ),
            created as (
              insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
              select d.org_id, d.account_id, d.asset, d.kind, d.available, d.held, d.in_flight, d.available + d.held + d.in_flight, ${updatedAt}::timestamptz
              from d
              where not exists (select 1 from ledger_balances b where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset)
              returning org_id, account_id, asset, kind, available, held, in_flight, total
            ),
            updated as (
              update ledger_balances as b set
                available = b.available + d.available, held = b.held + d.held, in_flight = b.in_flight + d.in_flight,
                total = b.total + d.available + d.held + d.in_flight, updated_at = ${updatedAt}::timestamptz
              from d
              where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset
              returning b.org_id, b.account_id, b.asset, b.kind, b.available, b.held, b.in_flight, b.total
            )
            select org_id, account_id, asset, kind, available::text as available, held::text as held, in_flight::text as in_flight, total::text as total from created
            union all
            select org_id, account_id, asset, kind, available::text, held::text, in_flight::text, total::text from updated`,
      )
      assert(rows.length === deltas.length, 'every touched balance row was written exactly once')
      read(
        rows.map((row) => ({
          orgId: row.org_id!,
          accountId: row.account_id!,
          asset: row.asset!,
          kind: row.kind as HotBalance['kind'],
          available: BigInt(row.available!),
          held: BigInt(row.held!),
          inFlight: BigInt(row.in_flight!),
          total: BigInt(row.total!),
        })),
      )
    }
  }

  /**
   * At the commit point the database must hold exactly memory minus what is still queued, and
   * every row must keep the contract's invariant. A mismatch means a bug: the batch is refused.
   */
  private assertCommitPoint(written: HotBalance[]): void {
    const pending = new Map<string, BalanceDelta>()
    for (const item of this.queue) if (!item.withdrawn) deltasOf(item.op.orgId, item.op.postings, 1n, pending)
    for (const row of written) {
      assert(row.total === row.available + row.held + row.inFlight, `balance ${row.accountId} ${row.asset} breaks total = available + held + inFlight`)
      if (row.kind === 'customer') assert(row.available >= 0n && row.held >= 0n && row.inFlight >= 0n, `balance ${row.accountId} went negative`)
      const key = balanceKey(row.orgId, row.accountId, row.asset)
      const memory = this.balances.getByKey(key)
      assert(memory !== undefined, `balance ${row.accountId} ${row.asset} is missing from memory`)
      const queued = pending.get(key)
      assert(memory.available - (queued?.available ?? 0n) === row.available, `available of ${row.accountId} differs between memory and database`)
      assert(memory.held - (queued?.held ?? 0n) === row.held, `held of ${row.accountId} differs between memory and database`)
      assert(memory.inFlight - (queued?.inFlight ?? 0n) === row.inFlight, `inFlight of ${row.accountId} differs between memory and database`)
    }
  }

  private domainStatements(tx: Transaction, ops: LedgerOperation[]): Statement[] {
    const statements: Statement[] = []
    const holdRows = ops.flatMap((op) => op.holds ?? [])
    const transferRows = ops.flatMap((op) => op.transfers ?? [])
    const paymentRows = ops.flatMap((op) => op.payments ?? [])
    const eventRows = ops.flatMap((op) => op.events ?? [])
    if (holdRows.length > 0) statements.push(() => queryPrepared(tx, bulkInsert(holds, lastStatePerId(holdRows), upsertTail('id', ['state', 'captured_amount', 'transfer_id', 'closed_at']))))
    if (transferRows.length > 0) statements.push(() => queryPrepared(tx, bulkInsert(transfers, transferRows)))
    if (paymentRows.length > 0) statements.push(() => queryPrepared(tx, bulkInsert(payments, lastStatePerId(paymentRows), upsertTail('id', ['state', 'failure_code', 'captured_amount', 'closed_at']))))
    const arrivalRows = ops.flatMap((op) => op.chainArrivals ?? [])
    // A new arrival conflicts on its id only when it is being moved on; the (network, txHash,
    // address) key refuses a second row for the same observation, failing the commit loudly.
    if (arrivalRows.length > 0) {
      statements.push(() =>
        queryPrepared(tx, bulkInsert(chainArrivals, lastStatePerId(arrivalRows), upsertTail('id', ['state', 'disposition', 'account_id', 'deposit_id', 'finalized_at', 'resolved_at', 'resolution_note']))),
      )
    }
    const depositRows = ops.flatMap((op) => op.deposits ?? [])
    if (depositRows.length > 0) {
      statements.push(() =>
        queryPrepared(tx, bulkInsert(deposits, lastStatePerId(depositRows), upsertTail('id', ['state', 'received_amount', 'amount_match', 'arrival_id', 'tx_hash', 'arrived_at', 'completed_at']))),
      )
    }
    // Events go in the same transaction as the change they describe (the outbox), in one statement
    // per batch, in queue order.
    if (eventRows.length > 0) statements.push(() => queryPrepared(tx, bulkInsert(events, eventRows)))
    for (const answer of ops.flatMap((op) => (op.idempotencyAnswer ? [op.idempotencyAnswer] : []))) {
      statements.push(() =>
        tx
          .update(idempotencyRecords)
          .set({ responseStatus: answer.responseStatus, responseBody: answer.responseBody })
          .where(and(eq(idempotencyRecords.orgId, answer.orgId), eq(idempotencyRecords.key, answer.key))),
      )
    }
    return statements
  }

  private async failUncommitted(batch: Queued[], error: unknown): Promise<void> {
    const failed = batch.concat(this.queue.splice(0).filter((item) => !item.withdrawn))
    this.waiting.clear()
    console.error(`ledger: a commit of ${batch.length} operation(s) failed; failing ${failed.length} uncommitted operation(s)`, error)
    // Undo in reverse order of reservation, so each undo sees the state its reservation left.
    for (const item of [...failed].reverse()) this.undo(item)
    await this.reconcile(failed)
    const failure = new CommitFailedError(error)
    for (const item of failed) item.reject(failure)
  }

  /**
   * After undoing, memory should equal the database for every touched row. The database is the
   * truth: if a commit failed ambiguously (it may have succeeded), memory takes the database's values.
   */
  private async reconcile(failed: Queued[]): Promise<void> {
    const touched = new Map<string, BalanceDelta>()
    for (const item of failed) for (const [key, delta] of item.deltas) touched.set(key, delta)
    try {
      await this.readBack(touched)
    } catch (error) {
      console.error('ledger: could not read balances back after a failed commit; memory keeps the undone values', error)
    }
  }

  /**
   * Takes the database's values into memory for these balances (plus what is still queued), between
   * batches, when nothing is being written. For a caller that learns a commit reported as failed
   * did land after all (its reply was lost with the connection). Rejects if the database cannot be read.
   */
  resync(touched: Map<string, BalanceDelta>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.resyncs.push({ touched, resolve, reject })
      if (!this.running) void this.run()
    })
  }

  private async readBack(touched: Map<string, BalanceDelta>): Promise<void> {
    if (touched.size === 0) return
    const accountIds = [...new Set([...touched.values()].map((delta) => delta.accountId))]
    const rows: HotBalance[] = await this.db.select().from(ledgerBalances).where(inArray(ledgerBalances.accountId, accountIds))
    const pending = new Map<string, BalanceDelta>()
    for (const item of this.queue) if (!item.withdrawn) deltasOf(item.op.orgId, item.op.postings, 1n, pending)
    for (const [key, delta] of touched) {
      const stored = rows.find((row) => balanceKey(row.orgId, row.accountId, row.asset) === key)
      const database: HotBalance = stored ?? { ...delta, available: 0n, held: 0n, inFlight: 0n, total: 0n }
      const queued = pending.get(key)
      const expected: HotBalance = {
        ...database,
        available: database.available + (queued?.available ?? 0n),
        held: database.held + (queued?.held ?? 0n),
        inFlight: database.inFlight + (queued?.inFlight ?? 0n),
        total: database.total + (queued ? queued.available + queued.held + queued.inFlight : 0n),
      }
      const memory = this.balances.getByKey(key)
      if (memory && memory.available === expected.available && memory.held === expected.held && memory.inFlight === expected.inFlight) continue
      console.error(`ledger: memory of ${delta.accountId} ${delta.asset} differed from the database; taking the database's values`)
      this.balances.load(expected)
    }
  }
}
