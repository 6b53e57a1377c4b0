// A pending hold and its view of a slot of `PendingHolds` (pending-holds.ts), which keeps holds in
// typed arrays; the view is what callers hold.

/** A hold that is still pending, as memory knows it. `closing` is set while its capture, release or expiry commits. */
export interface PendingHold {
  id: string
  orgId: string
  accountId: string
  asset: string
  amountMinor: bigint
  /**
   * Times as epoch milliseconds, not `Date`s: a hold can stay pending for a day, and every object it
   * keeps is one more for the garbage collector to trace (a number is stored in the hold itself).
   */
  expiresAtMs: number
  createdAtMs: number
  closing: boolean
  /**
   * The expiry sweep is closing it: while that commit is in flight, a capture or release is refused
   * `hold_expired`, as it is once the hold's expiry has committed (not `hold_not_active`, the answer
   * while a capture or release is closing it).
   */
  expiring?: boolean
  /** The resource that owns this hold (a payment's id): only it may capture or release the hold. */
  ownerId?: string
  /** The owner's row is in Postgres (its commit landed, or it was loaded at start). */
  ownerDurable?: boolean
}

/** What a pending hold is made of (`newPendingHold`). */
export type PendingHoldFields = Pick<PendingHold, 'id' | 'orgId' | 'accountId' | 'asset' | 'amountMinor' | 'expiresAtMs' | 'createdAtMs' | 'ownerId' | 'ownerDurable'>

export const CLOSING = 1
export const EXPIRING = 2
export const OWNER_DURABLE = 4

/** What a view reads and writes of the slot it is attached to (`PendingHolds`). */
export interface HoldSlots {
  generationOf(slot: number): number
  flagsOf(slot: number): number
  setFlags(slot: number, flags: number): void
  ownerOf(slot: number, holdId: string): string | undefined
  setOwner(slot: number, holdId: string, ownerId: string | undefined): void
}

/**
 * A pending hold as callers see it: a view of one slot of `PendingHolds` while that slot holds it
 * (attached), or a value of its own before it is set and after it is deleted (detached). Its
 * immutable fields are its own; its mutable ones (`closing`, `expiring`, `ownerDurable`,
 * `ownerId`) are read from and written to the slot while attached, so every view of one pending
 * hold sees what any of them wrote, and a view kept across a wait sees what happened meanwhile. A
 * view is attached to one generation of its slot: once the hold is deleted the slot's generation
 * moves on and the view falls back to its own copies (the last values it read or wrote).
 *
 * Nothing of a pending hold stays in the collector's heap once its callers drop their views: a hold
 * can stay pending for a day, and every full collection traced each of them (docs/architecture.md, "The ledger").
 */
export class StoredHold implements PendingHold {
  readonly id: string
  readonly orgId: string
  readonly accountId: string
  readonly asset: string
  readonly expiresAtMs: number
  readonly createdAtMs: number
  /** The amount as a number when it is a safe integer, else the bigint (`amountMinor` gives back a bigint). */
  private readonly amount: number | bigint
  private flags: number
  private owner: string | undefined
  /** The slot this view is attached to, and its generation then; `store` undefined while detached. */
  store: HoldSlots | undefined
  slot = -1
  generation = 0

  /** The fields but the amount (given as kept, see `amount`) and the flags (`CLOSING` and the rest). */
  constructor(fields: Omit<PendingHoldFields, 'amountMinor' | 'ownerDurable'>, amount: number | bigint, flags: number) {
    this.id = fields.id
    this.orgId = fields.orgId
    this.accountId = fields.accountId
    this.asset = fields.asset
    this.expiresAtMs = fields.expiresAtMs
    this.createdAtMs = fields.createdAtMs
    this.amount = amount
    this.flags = flags
    this.owner = fields.ownerId
  }

  get amountMinor(): bigint {
    return typeof this.amount === 'number' ? BigInt(this.amount) : this.amount
  }

  /** The amount as kept (see `amount`). */
  get amountKept(): number | bigint {
    return this.amount
  }

  /** Whether this view still shows its slot (the hold is pending in `store`). */
  get attached(): boolean {
    return this.store !== undefined && this.store.generationOf(this.slot) === this.generation
  }

  private currentFlags(): number {
    if (this.attached) this.flags = this.store!.flagsOf(this.slot)
    return this.flags
  }

  private setFlag(flag: number, on: boolean): void {
    const flags = on ? this.currentFlags() | flag : this.currentFlags() & ~flag
    this.flags = flags
    if (this.attached) this.store!.setFlags(this.slot, flags)
  }

  get closing(): boolean {
    return (this.currentFlags() & CLOSING) !== 0
  }

  set closing(closing: boolean) {
    this.setFlag(CLOSING, closing)
  }

  get expiring(): boolean | undefined {
    return (this.currentFlags() & EXPIRING) !== 0 ? true : undefined
  }

  set expiring(expiring: boolean | undefined) {
    this.setFlag(EXPIRING, expiring === true)
  }

  get ownerDurable(): boolean | undefined {
    return (this.currentFlags() & OWNER_DURABLE) !== 0 ? true : undefined
  }

  set ownerDurable(durable: boolean | undefined) {
    this.setFlag(OWNER_DURABLE, durable === true)
  }

  get ownerId(): string | undefined {
    if (this.attached) this.owner = this.store!.ownerOf(this.slot, this.id)
    return this.owner
  }

  set ownerId(ownerId: string | undefined) {
    this.owner = ownerId
    if (this.attached) this.store!.setOwner(this.slot, this.id, ownerId)
  }

  /** The flags as this view last saw them (for `PendingHolds.set`). */
  get flagsKept(): number {
    return this.currentFlags()
  }
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/** A pending hold for `PendingHolds` (see `StoredHold`); `closing` starts false. */
export function newPendingHold(fields: PendingHoldFields): PendingHold {
  const amount = fields.amountMinor >= -MAX_SAFE && fields.amountMinor <= MAX_SAFE ? Number(fields.amountMinor) : fields.amountMinor
  return new StoredHold(fields, amount, fields.ownerDurable === true ? OWNER_DURABLE : 0)
}
