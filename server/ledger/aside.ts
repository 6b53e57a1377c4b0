import type { TextStatement } from '../../db/bulk.ts'
import { queryText, type Database } from '../../db/client.ts'
import type { ApiError } from '../lib/errors.ts'
import { checkFence, fenceRefusal, FenceRefused, orgsOf, type CommitFence } from './fence.ts'
import { batchStatement } from './batch-statement.ts'
import { deltasOf, type BalanceDelta, type HotBalances } from './hot-balances.ts'
import { CommitFailedError, type BatchTiming, type GuardedWrite, type LedgerOperation } from './operation.ts'
import type { WriteSetRegistry } from './write-sets.ts'

/** Operations of a bundle written per statement of its transaction. */
const ASIDE_OPERATIONS_PER_STATEMENT = 1

/** A bundle's guarded write answered false: rolled back, refused with `refusal`. */
class GuardRefusal extends Error {
  constructor(readonly refusal: ApiError) {
    super('guarded write refused')
  }
}

/** What bundles committed aside need of the writer beside which they commit. */
export interface AsideDeps {
  db: Database
  balances: HotBalances
  fence: CommitFence | undefined
  writeSets: WriteSetRegistry
  /** The writer's clock (a committed bundle's timing is read on it). */
  now(): number
  /** A bundle failed after its guarded writes: the balances it touched must be read back. */
  failed(deltas: Map<string, BalanceDelta>): void
  /** A bundle started or ended: the writer may send what waited for it. */
  changed(): void
}

/**
 * Bundles (`Ledger.submitBundle`) committed beside the writer's batches, each as one transaction of
 * its own on the shared pool, not through the queue: a settlement of many thousand operations must
 * not hold the request path's writes behind it. Balances are written by adding deltas, so its
 * commit and the batches' commute; while it is on its way its deltas count as pending at every
 * commit point.
 */
export class AsideCommits {
  /** Deltas of bundles committing, reserved in memory and not yet in Postgres. */
  private readonly bundles = new Set<Map<string, BalanceDelta>>()
  /**
   * Moves whenever a bundle starts or ends committing. A batch whose flight overlapped one cannot
   * tell whether the database rows it read back include that bundle's deltas, so its commit-point
   * check is skipped (verify still proves the ledger); reconciliation waits for them.
   */
  generation = 0

  constructor(private readonly deps: AsideDeps) {}

  /** Whether a bundle is committing now. */
  get active(): boolean {
    return this.bundles.size > 0
  }

  /**
   * Commits a bundle, its deltas already reserved in memory. The fence is checked first, then its
   * guarded writes run; one answering false rolls it back and it rejects with that write's refusal
   * (a false fence with `partner_unavailable`). A failure undoes its reservation and has the
   * balances it touched read back before the writer sends again.
   */
  async commit(ops: LedgerOperation[], guardedWrites: GuardedWrite[], deltas: Map<string, BalanceDelta>): Promise<void> {
    this.begin(deltas)
    try {
      await this.deps.db.transaction(async (tx) => {
        await checkFence(tx, this.deps.fence, orgsOf(ops))
        for (const guarded of guardedWrites) if (!(await guarded.write(tx))) throw new GuardRefusal(guarded.refusal())
        // A few operations per statement: each statement is built while the previous one runs in
        // Postgres, never the whole bundle in one synchronous step of this thread.
        for (let from = 0; from < ops.length; from += ASIDE_OPERATIONS_PER_STATEMENT) {
          await queryText(tx, this.statement(ops.slice(from, from + ASIDE_OPERATIONS_PER_STATEMENT)))
        }
      })
    } catch (error) {
      this.end(deltas)
      this.deps.balances.apply([...deltas.values()].map((delta) => ({ ...delta, available: -delta.available, held: -delta.held, inFlight: -delta.inFlight })))
      for (const op of [...ops].reverse()) op.revert?.()
      // Refused before anything was written: the reservation undone above is all there is to undo.
      if (error instanceof GuardRefusal) {
        this.deps.changed()
        throw error.refusal
      }
      if (error instanceof FenceRefused) {
        this.deps.changed()
        throw fenceRefusal()
      }
      // Whatever was decided against the reservation meanwhile is judged again against Postgres.
      this.deps.failed(deltas)
      throw new CommitFailedError(error)
    }
    this.end(deltas)
    // Its rows were read back while batches may have committed beside it: no commit-point check
    // here (see `generation`); verify proves the ledger. A reconciliation waiting for it may go.
    this.deps.changed()
    const now = this.deps.now()
    const timing: BatchTiming = { sentAt: now, committedAt: now, operations: ops.length, behind: 0 }
    for (const op of ops) op.committed?.(timing, now)
  }

  /** Some of a bundle's operations as one statement: outside the writer's order, their deltas summed. */
  private statement(ops: LedgerOperation[]): TextStatement {
    const deltas = new Map<string, BalanceDelta>()
    for (const op of ops) deltasOf(op.orgId, op.postings, 1n, deltas)
    return batchStatement({ ops, deltas: [deltas], order: undefined }, this.deps.writeSets, this.deps.fence)
  }

  private begin(deltas: Map<string, BalanceDelta>): void {
    this.bundles.add(deltas)
    this.generation += 1
  }

  private end(deltas: Map<string, BalanceDelta>): void {
    this.bundles.delete(deltas)
    this.generation += 1
  }
}
