import type { Transaction } from '../../db/client.ts'
import { ApiError } from '../lib/errors.ts'
import type { IdempotencyRow } from '../platform/idempotency.ts'
import type { Posting } from './hot-balances.ts'
import type { OperationRows } from './write-sets.ts'

/*
 * What callers hand the ledger and what it answers: an operation, its timing once committed, and
 * the errors it may end with. The writer (`writer.ts`) commits these.
 */

/** A saved answer replaced in the same commit (an answer that changed after it was queued). */
export interface IdempotencyAnswer {
  orgId: string
  key: string
  responseStatus: number
  responseBody: string
}

/**
 * Everything one operation writes: its movement, its postings, and the rows of the modules' write
 * sets it carries (`OperationRows`, for instance `payments: [row]`). The writer turns a batch of
 * these into one statement, so a batch of a hundred costs one round trip as a batch of one does.
 */
export type LedgerOperation = OperationWrites & OperationRows & (OwnMovement | MovementInRow)

/** The movement is written as a row of its own in `ledger_movements` (its legs in its row). */
export interface OwnMovement {
  movementId: string
  movementKind: string
  /** The resource that caused the movement (`tr_…`, `hold_…`, `pay_…`, a sandbox funding id). */
  reference: string
  recordedByRow?: undefined
}

/**
 * A movement recorded by a row the operation carries in a write set of `recordingMovement`
 * operations instead of a row of `ledger_movements` (an authorization's reservation, by its payment
 * row): that row already holds everything the movement would (organization, account, asset,
 * amount, time, and the hold's id, set only when the reservation committed with it), and a
 * movement row cost Postgres a heap tuple and two index entries more per authorization. Its two
 * legs (amount from the account's available to its held) are read from the row wherever the
 * journal is read (the write set's `journal`, server/ledger/journal.ts); the database refuses any
 * change to those columns once written (migration 0013). `Ledger.submit` checks the postings are
 * exactly those legs.
 */
interface MovementInRow {
  recordedByRow: true
}

/** Everything an operation writes and does besides its movement's own record. */
interface OperationWrites {
  orgId: string
  createdAt: Date
  postings: Posting[]
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
   * Time on the writer's clock (`performance.now()` in a server) after which the caller no longer
   * waits (an authorization's budget). An operation still queued that could not commit before it is
   * withdrawn instead of being written late: under overload the writer spends its time on
   * operations that can still make it.
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

/** A committed batch's times (on the writer's clock: `performance.now()` in a server), one object shared by its operations. */
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

/** The operation was withdrawn before it was written: nothing of it was applied. */
export class OperationWithdrawn extends Error {
  constructor() {
    super('The operation was withdrawn before it was written')
  }
}

/** Distinguishes "the database refused" from a business rule; callers answer it as internal. */
export class CommitFailedError extends ApiError {
  constructor(cause: unknown) {
    super('internal', 'The ledger could not commit this operation; nothing was applied')
    this.cause = cause
  }
}

