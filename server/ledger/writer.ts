import { inArray, sql } from 'drizzle-orm'
import { queryRows, type Database, type Transaction } from '../../db/client.ts'
import { chainArrivals, deposits, events, holds, ledgerBalances, ledgerMovements, ledgerPostings, payments, transfers } from '../../db/schema/index.ts'
import { assert } from '../lib/assert.ts'
import { ApiError } from '../lib/errors.ts'
import { balanceKey, deltasOf, type BalanceDelta, type HotBalance, type HotBalances, type Posting } from './hot-balances.ts'

export type HoldRow = typeof holds.$inferInsert
export type TransferRow = typeof transfers.$inferInsert
export type EventRow = typeof events.$inferInsert
export type PaymentRow = typeof payments.$inferInsert
export type DepositRow = typeof deposits.$inferInsert
export type ChainArrivalRow = typeof chainArrivals.$inferInsert

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
  resolve: () => void
  reject: (error: unknown) => void
}

export interface WriterOptions {
  groupCommit: boolean
  /** Upper bound on operations per transaction; keeps statements under Postgres' parameter limit. */
  batchMax: number
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
  private running = false
  private idleWaiters: Array<() => void> = []
  committedOperations = 0
  committedBatches = 0

  constructor(
    private readonly db: Database,
    private readonly balances: HotBalances,
    private readonly options: WriterOptions,
  ) {}

  /** Reserves in memory (already done by the caller) and resolves once the commit is durable. */
  enqueue(op: LedgerOperation, deltas: Map<string, BalanceDelta>): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ op, deltas, resolve, reject })
      if (!this.running) void this.run()
    })
  }

  /** Resolves when nothing is queued or being written. */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve()
    return new Promise((resolve) => this.idleWaiters.push(resolve))
  }

  pendingCount(): number {
    return this.queue.length
  }

  private async run(): Promise<void> {
    this.running = true
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.options.groupCommit ? this.options.batchMax : 1)
        try {
          await this.db.transaction((tx) => this.writeBatch(tx, batch))
        } catch (error) {
          if (error instanceof GuardsRefusedError) this.refuseGuarded(batch, error.refused)
          else await this.failUncommitted(batch, error)
          continue
        }
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

  private async writeBatch(tx: Transaction, batch: Queued[]): Promise<void> {
    await this.runGuardedWrites(tx, batch)
    const ops = batch.map((item) => item.op)
    await tx.insert(ledgerMovements).values(
      ops.map((op) => ({ id: op.movementId, orgId: op.orgId, kind: op.movementKind, reference: op.reference, createdAt: op.createdAt })),
    )
    await tx.insert(ledgerPostings).values(
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
    )
    const written = await this.upsertBalances(tx, batch)
    this.assertCommitPoint(written)
    await this.writeDomainRows(tx, ops)
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
   * the head of the queue. Undoing a reservation only returns money to where it came from, so the
   * decisions of the operations behind it stay valid.
   */
  private refuseGuarded(batch: Queued[], refused: Map<Queued, ApiError>): void {
    for (const item of [...batch].reverse()) {
      if (!refused.has(item)) continue
      const undo = [...item.deltas.values()].map((delta) => ({ ...delta, available: -delta.available, held: -delta.held, inFlight: -delta.inFlight }))
      this.balances.apply(undo)
      item.op.revert?.()
    }
    this.queue.unshift(...batch.filter((item) => !refused.has(item)))
    for (const [item, error] of refused) item.reject(error)
  }

  private async upsertBalances(tx: Transaction, batch: Queued[]): Promise<HotBalance[]> {
    const combined = new Map<string, BalanceDelta>()
    for (const item of batch) deltasOf(item.op.orgId, item.op.postings, 1n, combined)
    const deltas = [...combined.values()]
    const updatedAt = new Date()
    // Rows start at zero; Postgres checks a proposed insert row before it looks for a conflict,
    // so the deltas cannot travel in an upsert's VALUES without tripping the non-negative check.
    await tx
      .insert(ledgerBalances)
      .values(deltas.map((delta) => ({ orgId: delta.orgId, accountId: delta.accountId, asset: delta.asset, kind: delta.kind, available: 0n, held: 0n, inFlight: 0n, total: 0n, updatedAt })))
      .onConflictDoNothing()
    // Deltas, not absolute values: Postgres adds them to what it holds, so its own checks (no
    // negative customer bucket) judge the real result.
    const values = sql.join(
      deltas.map(
        (delta) =>
          sql`(${delta.orgId}, ${delta.accountId}, ${delta.asset}, ${delta.available.toString()}::numeric, ${delta.held.toString()}::numeric, ${delta.inFlight.toString()}::numeric)`,
      ),
      sql`, `,
    )
    const rows = await queryRows<Record<string, string>>(
      tx,
      sql`update ledger_balances as b set
            available = b.available + d.available, held = b.held + d.held, in_flight = b.in_flight + d.in_flight,
            total = b.total + d.available + d.held + d.in_flight, updated_at = ${updatedAt.toISOString()}::timestamptz
          from (values ${values}) as d(org_id, account_id, asset, available, held, in_flight)
          where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset
          returning b.org_id, b.account_id, b.asset, b.kind, b.available::text as available, b.held::text as held,
                    b.in_flight::text as in_flight, b.total::text as total`,
    )
    assert(rows.length === deltas.length, 'every touched balance row was updated exactly once')
    return rows.map((row) => ({
      orgId: row.org_id!,
      accountId: row.account_id!,
      asset: row.asset!,
      kind: row.kind as HotBalance['kind'],
      available: BigInt(row.available!),
      held: BigInt(row.held!),
      inFlight: BigInt(row.in_flight!),
      total: BigInt(row.total!),
    }))
  }

  /**
   * At the commit point the database must hold exactly memory minus what is still queued, and
   * every row must keep the contract's invariant. A mismatch means a bug: the batch is refused.
   */
  private assertCommitPoint(written: HotBalance[]): void {
    const pending = new Map<string, BalanceDelta>()
    for (const item of this.queue) deltasOf(item.op.orgId, item.op.postings, 1n, pending)
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

  private async writeDomainRows(tx: Transaction, ops: LedgerOperation[]): Promise<void> {
    const holdRows = ops.flatMap((op) => op.holds ?? [])
    const transferRows = ops.flatMap((op) => op.transfers ?? [])
    const eventRows = ops.flatMap((op) => op.events ?? [])
    if (holdRows.length > 0) {
      await tx
        .insert(holds)
        .values(lastStatePerId(holdRows))
        .onConflictDoUpdate({
          target: holds.id,
          set: {
            state: sql`excluded.state`,
            capturedAmount: sql`excluded.captured_amount`,
            transferId: sql`excluded.transfer_id`,
            closedAt: sql`excluded.closed_at`,
          },
        })
    }
    if (transferRows.length > 0) await tx.insert(transfers).values(transferRows)
    const paymentRows = ops.flatMap((op) => op.payments ?? [])
    if (paymentRows.length > 0) {
      await tx
        .insert(payments)
        .values(lastStatePerId(paymentRows))
        .onConflictDoUpdate({
          target: payments.id,
          set: {
            state: sql`excluded.state`,
            failureCode: sql`excluded.failure_code`,
            capturedAmount: sql`excluded.captured_amount`,
            closedAt: sql`excluded.closed_at`,
          },
        })
    }
    // Events go in the same transaction as the change they describe (the outbox). They are
    // inserted in one statement per batch, in queue order, so the log's order is commit order.
    const arrivalRows = ops.flatMap((op) => op.chainArrivals ?? [])
    if (arrivalRows.length > 0) {
      // A new arrival conflicts on its id only when it is being moved on; the (network, txHash,
      // address) key refuses a second row for the same observation, failing the commit loudly.
      await tx
        .insert(chainArrivals)
        .values(lastStatePerId(arrivalRows))
        .onConflictDoUpdate({
          target: chainArrivals.id,
          set: {
            state: sql`excluded.state`,
            disposition: sql`excluded.disposition`,
            accountId: sql`excluded.account_id`,
            depositId: sql`excluded.deposit_id`,
            finalizedAt: sql`excluded.finalized_at`,
            resolvedAt: sql`excluded.resolved_at`,
            resolutionNote: sql`excluded.resolution_note`,
          },
        })
    }
    const depositRows = ops.flatMap((op) => op.deposits ?? [])
    if (depositRows.length > 0) {
      await tx
        .insert(deposits)
        .values(lastStatePerId(depositRows))
        .onConflictDoUpdate({
          target: deposits.id,
          set: {
            state: sql`excluded.state`,
            receivedAmount: sql`excluded.received_amount`,
            amountMatch: sql`excluded.amount_match`,
            arrivalId: sql`excluded.arrival_id`,
            txHash: sql`excluded.tx_hash`,
            arrivedAt: sql`excluded.arrived_at`,
            completedAt: sql`excluded.completed_at`,
          },
        })
    }
    if (eventRows.length > 0) await tx.insert(events).values(eventRows)
  }

  private async failUncommitted(batch: Queued[], error: unknown): Promise<void> {
    const failed = batch.concat(this.queue.splice(0))
    console.error(`ledger: a commit of ${batch.length} operation(s) failed; failing ${failed.length} uncommitted operation(s)`, error)
    // Undo in reverse order of reservation, so each undo sees the state its reservation left.
    for (const item of [...failed].reverse()) {
      const undo = [...item.deltas.values()].map((delta) => ({ ...delta, available: -delta.available, held: -delta.held, inFlight: -delta.inFlight }))
      this.balances.apply(undo)
      item.op.revert?.()
    }
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
    if (touched.size === 0) return
    let rows: HotBalance[]
    try {
      const accountIds = [...new Set([...touched.values()].map((delta) => delta.accountId))]
      rows = await this.db.select().from(ledgerBalances).where(inArray(ledgerBalances.accountId, accountIds))
    } catch (error) {
      console.error('ledger: could not read balances back after a failed commit; memory keeps the undone values', error)
      return
    }
    const pending = new Map<string, BalanceDelta>()
    for (const item of this.queue) deltasOf(item.op.orgId, item.op.postings, 1n, pending)
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
      console.error(`ledger: memory of ${delta.accountId} ${delta.asset} differed from the database after a failed commit; taking the database's values`)
      this.balances.load(expected)
    }
  }
}
