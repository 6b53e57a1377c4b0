import { addDeltas, type BalanceDelta } from './hot-balances.ts'
import type { LedgerOperation } from './operation.ts'

/** An operation waiting for the writer, reserved in memory, with its caller's promise. */
export interface Queued {
  op: LedgerOperation
  deltas: Map<string, BalanceDelta>
  /** Taken back before a batch took it: already undone, skipped by the writer. */
  withdrawn: boolean
  /** When it was queued (on the writer's clock). */
  queuedAt: number
  /**
   * Set on the operations of a failed batch sent again to find the one at fault: those sharing
   * this object go in a batch of their own (see `markHalves`).
   */
  isolation?: object
  resolve: () => void
  reject: (error: unknown) => void
}

/**
 * The writer's queue, in decision order. An operation can be withdrawn (found by identity, without
 * searching) until a batch takes it; withdrawn ones stay in place, skipped, until they reach the head.
 */
export class OperationQueue {
  private items: Queued[] = []
  /** Queued operations not withdrawn nor taken, by identity. */
  private readonly waiting = new Map<LedgerOperation, Queued>()

  /** Operations waiting (withdrawn ones not counted). */
  get size(): number {
    return this.waiting.size
  }

  /** Nothing at all in the queue, withdrawn entries included. */
  get empty(): boolean {
    return this.items.length === 0
  }

  push(item: Queued): void {
    this.items.push(item)
    this.waiting.set(item.op, item)
  }

  /** Takes a waiting operation back (marked withdrawn); undefined when a batch already took it. */
  withdraw(op: LedgerOperation): Queued | undefined {
    const item = this.waiting.get(op)
    if (item === undefined) return undefined
    this.waiting.delete(op)
    item.withdrawn = true
    return item
  }

  /** The first operation still waiting. */
  head(): Queued | undefined {
    while (this.items.length > 0 && this.items[0]!.withdrawn) this.items.shift()
    return this.items[0]
  }

  /** Waiting operations, in order. */
  *live(): Generator<Queued> {
    for (const item of this.items) if (!item.withdrawn) yield item
  }

  /**
   * Takes the next batch off the queue: up to `batchMax` operations of the head's isolation group
   * (operations sent again to find the one that failed their batch go only with their own group),
   * stopping before an operation with guarded writes unless `guarded`. An operation whose deadline
   * is before `latestStart` is handed to `tooLate` (withdrawn rather than written late).
   */
  takeBatch(batchMax: number, guarded: boolean, latestStart: number, tooLate: (op: LedgerOperation) => void): Queued[] {
    const batch: Queued[] = []
    const isolation = this.head()?.isolation
    let taken = 0
    while (batch.length < batchMax && taken < this.items.length) {
      const item = this.items[taken]!
      if (item.withdrawn) {
        taken += 1
        continue
      }
      if (item.isolation !== isolation) break
      if (!guarded && item.op.guardedWrites !== undefined && item.op.guardedWrites.length > 0) break
      taken += 1
      if (item.op.deadline !== undefined && item.op.deadline < latestStart) {
        tooLate(item.op)
        continue
      }
      this.waiting.delete(item.op)
      batch.push(item)
    }
    this.items.splice(0, taken)
    return batch
  }

  /** Puts operations taken by a batch back at the head, in order, where they can be withdrawn again. */
  putBack(items: Queued[]): void {
    for (const item of items) this.waiting.set(item.op, item)
    this.items.unshift(...items)
  }

  /** Empties the queue, answering the operations that were waiting. */
  takeAll(): Queued[] {
    const live = this.items.splice(0).filter((item) => !item.withdrawn)
    this.waiting.clear()
    return live
  }

  /** The waiting operations' deltas, summed per balance into `into`. */
  addDeltasTo(into: Map<string, BalanceDelta>): Map<string, BalanceDelta> {
    for (const item of this.items) if (!item.withdrawn) addDeltas(into, item.deltas)
    return into
  }
}
