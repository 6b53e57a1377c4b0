import type { Database } from '../../../db/client.ts'
import type { Posting } from '../../ledger/hot-balances.ts'
import type { Ledger, PendingHold } from '../../ledger/ledger.ts'
import type { HoldRow } from './write-sets.ts'
import { ApiError } from '../../lib/errors.ts'
import type { Clock } from '../clock/clock.ts'
import { findHold, type HoldRecord } from './repo.ts'

/**
 * The id of the hold an owner's own row records (`pay_X` owns `hold_X`). Such a hold has no row in
 * `holds`: the owner's row already carries its account, asset, amount, times and state, and a
 * second row was a heap tuple and two index entries more on every authorization (without it,
 * Postgres spent 54 to 57 µs per authorization in the closed loop against 67 to 69, and 8,834 and
 * 9,256/s were approved at 10,000/s offered against 6,504 and 7,888/s). Holds made before this
 * rule have ids of their own and keep their rows.
 */
export function ownedHoldId(ownerId: string): string {
  return `hold_${ownerId.slice(ownerId.indexOf('_') + 1)}`
}

/** The owner id (`<ownerKind>_X`) whose row would record `holdId` (`hold_X`) by `ownedHoldId`'s rule; undefined for an id not of that form. */
export function ownerOfHoldId(holdId: string, ownerKind: string): string | undefined {
  if (!holdId.startsWith('hold_')) return undefined
  const ownerId = `${ownerKind}_${holdId.slice('hold_'.length)}`
  return ownedHoldId(ownerId) === holdId ? ownerId : undefined
}

/** A hold's whole amount from held back to available: its release or its lapse. */
export function releasePostings(hold: PendingHold): Posting[] {
  const amountMinor = hold.amountMinor
  return [
    { accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor: -amountMinor },
    { accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor },
  ]
}

/** False for a hold whose owner's row is its record (see `ownedHoldId`). */
function keepsOwnRow(hold: PendingHold): boolean {
  return hold.ownerId === undefined || hold.id !== ownedHoldId(hold.ownerId)
}

/** The rows of `holds` a commit that moves this hold writes: its row, unless its owner's row is its record. */
export function holdRowsToWrite(hold: PendingHold, row: HoldRow): HoldRow[] {
  return keepsOwnRow(hold) ? [row] : []
}

/** Reads the hold an owner's row records, for holds that have no row of their own (registered by the owning module). */
export type OwnedHoldLookup = (orgId: string, holdId: string) => Promise<HoldRecord | undefined>

export interface HoldRecordsDeps {
  db: Database
  ledger: Ledger
  clock: Clock
}

/**
 * What a pending hold is and why one cannot be used, for every module that moves one: holds
 * themselves, transfers paid from a hold, and payments, which own the holds of their
 * authorizations. Memory knows the pending holds (`ledger.holds`); the database knows the rest, in
 * a hold's own row or in the row of the owner that records it (`registerOwner`).
 */
export class HoldRecords {
  private readonly owners: OwnedHoldLookup[] = []

  constructor(private readonly deps: HoldRecordsDeps) {}

  /** A module that records holds in its own rows (payments) says how to read one; before the service answers. */
  registerOwner(lookup: OwnedHoldLookup): void {
    this.owners.push(lookup)
  }

  /** A hold as the database records it: its own row, or else the row of the owner that records it. */
  async find(orgId: string, holdId: string): Promise<HoldRecord | undefined> {
    const row = await findHold(this.deps.db, orgId, holdId)
    if (row) return row
    for (const lookup of this.owners) {
      const owned = await lookup(orgId, holdId)
      if (owned) return owned
    }
    return undefined
  }

  /**
   * A hold that memory holds as pending, or the contract's answer for why it cannot be used:
   * not_found, hold_not_active (captured or released, or being captured or released right now) or
   * hold_expired (past its expiry, its expiry committing included).
   * Pending holds are always in memory, so a miss is never pending; the database says what it is.
   */
  async requirePending(orgId: string, holdId: string, field?: string): Promise<void> {
    const pending = this.deps.ledger.holds.get(holdId)
    if (pending && pending.orgId === orgId) return
    const row = await this.find(orgId, holdId)
    if (!row) throw new ApiError('not_found', 'No such hold', field ? { field } : {})
    if (row.state === 'expired') throw new ApiError('hold_expired', `Hold ${holdId} expired at ${row.expiresAt.toISOString()}`, field ? { field } : {})
    throw new ApiError('hold_not_active', `Hold ${holdId} is ${row.state}`, field ? { field } : {})
  }

  /**
   * The synchronous check made in the same step as the reservation: the hold is still pending, no
   * other capture or release is committing it, and the organization's clock has not passed its expiry.
   */
  take(orgId: string, holdId: string, field?: string, ownerId?: string): PendingHold {
    const options = field ? { field } : {}
    const pending = this.deps.ledger.holds.get(holdId)
    if (!pending || pending.orgId !== orgId) throw new ApiError('hold_not_active', `Hold ${holdId} is no longer pending`, options)
    // A payment's hold moves only through the payment, so its state and the hold's cannot diverge.
    if (pending.ownerId !== ownerId) throw new ApiError('hold_not_active', `Hold ${holdId} belongs to ${pending.ownerId ?? 'no owner'}; use that resource`, options)
    if (pending.closing && !pending.expiring) throw new ApiError('hold_not_active', `Hold ${holdId} is no longer pending`, options)
    if (pending.expiring || this.deps.clock.nowMs(orgId) >= pending.expiresAtMs) {
      throw new ApiError('hold_expired', `Hold ${holdId} expired at ${new Date(pending.expiresAtMs).toISOString()}`, options)
    }
    return pending
  }
}
