import { assert } from '../lib/assert.ts'
import { newPendingHold, type PendingHold, type PendingHoldFields } from './pending-hold.ts'
import { PendingHolds } from './pending-holds.ts'

/** What a ledger operation that closes a hold plugs in (see `HoldLifecycle.closing`). */
export interface ClosingHooks {
  reserve: () => void
  revert: () => void
  committed: () => void
}

/**
 * The one lifecycle of a pending hold, and the only way to change which holds memory keeps pending:
 * a hold is opened when its reservation is made (`open`, from the reserving operation's `reserve`),
 * taken back if that reservation is undone (`close`, from its `revert`), marked closing while its
 * capture, release or expiry commits (`closing`), and closed when that commit lands. `restore` puts
 * back a hold whose undo turned out wrong (a commit reported failed that had landed). Modules read
 * holds (`get`, `due`) and drive these steps; the map itself stays private to the ledger, so no
 * feature can leave a hold pending in memory that the database says is closed, or the other way.
 *
 * Every step is a method call on the same object with no allocation of its own: the authorization
 * path opens one hold per request.
 */
export class HoldLifecycle {
  private readonly pending = new PendingHolds()

  /** Holds pending in memory now. */
  get size(): number {
    return this.pending.size
  }

  /** A view of the pending hold with this id (a new object at each call), or undefined. */
  get(id: string): PendingHold | undefined {
    return this.pending.get(id)
  }

  /** Whether `hold` is a view of a hold still pending (not closed since it was opened or read). */
  isPending(hold: PendingHold): boolean {
    return this.pending.isPending(hold)
  }

  /**
   * Keeps `hold` (made by `newPendingHold`) pending from now on: called in the reservation's own
   * synchronous step (a ledger operation's `reserve`), so the next request sees it.
   */
  open(hold: PendingHold): void {
    this.pending.set(hold.id, hold)
  }

  /** Forgets the pending hold with this id: its close committed, or its reservation was undone. False if none was pending. */
  close(id: string): boolean {
    return this.pending.delete(id)
  }

  /**
   * Puts back a hold whose reservation memory undid but the database kept (a commit reported as
   * failed that had landed): pending again, with the flags it has now.
   */
  restore(hold: PendingHold): void {
    assert(!this.pending.isPending(hold), `hold ${hold.id} is restored only once memory has let it go`)
    this.pending.set(hold.id, hold)
  }

  /** Keeps a hold read from the database at start as pending (its reservation committed long ago). */
  load(fields: PendingHoldFields): PendingHold {
    const hold = newPendingHold(fields)
    this.pending.set(hold.id, hold)
    return hold
  }

  /** Names the owner of a pending hold loaded at start, whose owner's row is durable; false if no such hold is pending. */
  assignOwner(id: string, ownerId: string): boolean {
    const hold = this.pending.get(id)
    if (hold === undefined) return false
    hold.ownerId = ownerId
    hold.ownerDurable = true
    return true
  }

  /**
   * The hooks of an operation that closes `hold` (its capture, release, or expiry when `expiring`):
   * marked closing in its reservation's step, so no other close takes it; pending again if the
   * operation is undone; forgotten once it commits.
   */
  closing(hold: PendingHold, expiring = false): ClosingHooks {
    return {
      reserve: () => {
        hold.closing = true
        if (expiring) hold.expiring = true
      },
      revert: () => {
        hold.closing = false
        if (expiring) hold.expiring = undefined
      },
      committed: () => {
        this.pending.delete(hold.id)
      },
    }
  }

  /** Pending holds whose organization's clock has reached their expiry, at most `max` (see `PendingHolds.due`). */
  due(nowMs: (orgId: string) => number, max: number): PendingHold[] {
    return this.pending.due(nowMs, max)
  }

  /** Forgets the organizations' pending holds: another process decides for them now (`Ledger.forgetOrganizations`). */
  forgetOrganizations(orgIds: ReadonlySet<string>): void {
    this.pending.forgetOrganizations(orgIds)
  }

  /** Forgets every pending hold (a reload, as at a restart). */
  clear(): void {
    this.pending.clear()
  }
}
