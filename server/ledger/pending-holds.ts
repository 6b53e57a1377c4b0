import { GenerationalMap } from '../lib/generational-map.ts'
import type { PendingHold } from './ledger.ts'

/** What a pending hold is made of (`newPendingHold`). */
export type PendingHoldFields = Pick<PendingHold, 'id' | 'orgId' | 'accountId' | 'asset' | 'amountMinor' | 'expiresAtMs' | 'createdAtMs' | 'ownerId' | 'ownerDurable'>

/**
 * A pending hold as memory keeps it, for as long as a day (an uncaptured authorization): it reads
 * and writes as a `PendingHold`, in one object of the collector's where a plain one took three.
 * The amount is kept as a number when it is a safe integer (a number is stored in the object
 * itself, where a bigint is an object of its own), and an owner whose id follows the hold's
 * (`pay_X` owning `hold_X`, every authorization's) is kept as its kind, one string shared by all,
 * where its id was a string of its own per hold. Both are given back as they were set. Every full
 * collection traces every pending hold, and its cycles grow with them (README, "Benchmarks"):
 * `bench/authorize-memory.ts` measured 245 bytes and 2 objects per uncaptured authorization against
 * 345 and 4 with a plain object, and after four runs at 10,000/s (about 320,000 pending) the last
 * full collection found 92 MB live in a 146 ms cycle, against 135 MB in 202 ms.
 */
class StoredHold implements PendingHold {
  readonly id: string
  readonly orgId: string
  readonly accountId: string
  readonly asset: string
  readonly expiresAtMs: number
  readonly createdAtMs: number
  closing = false
  expiring?: boolean
  ownerDurable?: boolean
  private readonly amount: number | bigint
  /** The owner's kind when its id follows the hold's (see `ownerKindOf`), else its whole id. */
  private owner: string | undefined
  private ownerFollows = false

  constructor(fields: PendingHoldFields) {
    this.id = fields.id
    this.orgId = fields.orgId
    this.accountId = fields.accountId
    this.asset = fields.asset
    this.expiresAtMs = fields.expiresAtMs
    this.createdAtMs = fields.createdAtMs
    const amount = fields.amountMinor
    this.amount = amount >= -MAX_SAFE && amount <= MAX_SAFE ? Number(amount) : amount
    this.ownerId = fields.ownerId
    if (fields.ownerDurable !== undefined) this.ownerDurable = fields.ownerDurable
  }

  get amountMinor(): bigint {
    return typeof this.amount === 'number' ? BigInt(this.amount) : this.amount
  }

  get ownerId(): string | undefined {
    if (this.owner === undefined || !this.ownerFollows) return this.owner
    return `${this.owner}_${this.id.slice(this.id.indexOf('_') + 1)}`
  }

  set ownerId(ownerId: string | undefined) {
    const kind = ownerId === undefined ? undefined : ownerKindOf(this.id, ownerId)
    this.ownerFollows = kind !== undefined
    this.owner = kind ?? ownerId
  }
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER)

/** Owner kinds, each one string for every hold that has it. */
const ownerKinds = new Map<string, string>()

/** `ownerId`'s kind (`pay` of `pay_X`) when its id after the kind is the hold's (`hold_X`), else undefined. */
function ownerKindOf(holdId: string, ownerId: string): string | undefined {
  const ownerAt = ownerId.indexOf('_')
  const holdAt = holdId.indexOf('_')
  if (ownerAt <= 0 || holdAt <= 0 || ownerId.length - ownerAt !== holdId.length - holdAt || !ownerId.endsWith(holdId.slice(holdAt))) return undefined
  const kind = ownerId.slice(0, ownerAt)
  let shared = ownerKinds.get(kind)
  if (shared === undefined) {
    shared = kind
    ownerKinds.set(kind, shared)
  }
  return shared
}

/** A pending hold for `PendingHolds` (see `StoredHold`); `closing` starts false. */
export function newPendingHold(fields: PendingHoldFields): PendingHold {
  return new StoredHold(fields)
}

/** Width of an expiry bucket: the holds expiring within the same 10 s share one array. */
const BUCKET_MS = 10_000
/** A bucket's array is copied without its dropped front once that front is this long and half of it. */
const BUCKET_COMPACT_MIN = 1_024

/**
 * The pending holds memory knows, by id, with an expiry index beside them per organization (each
 * organization has its own clock). The expiry sweep then costs what is due, not what is pending:
 * with a hundred thousand authorizations outstanding a scan of every hold would block the event
 * loop for milliseconds four times a second.
 *
 * Both halves keep what the garbage collector must rescan small (see `GenerationalMap`): the holds
 * by id are a generational map, and the expiry index files each hold in a bucket of holds expiring
 * in the same 10 s, sorted by expiry, with the buckets' numbers in a min-heap of plain numbers. A
 * new hold is written into one bucket (appended, when holds arrive in expiry order as
 * authorizations of one lifetime do); the index used to be one min-heap array of every pending
 * hold, which each new hold made the collector rescan whole.
 *
 * The index is lazy: holds that were captured or released stay in their bucket until the sweep
 * reaches them, where it drops them because the map no longer holds them.
 */
export class PendingHolds {
  private readonly holds = new GenerationalMap<PendingHold>()
  private readonly expiries = new Map<string, ExpiryIndex>()

  get size(): number {
    return this.holds.size
  }

  get(id: string): PendingHold | undefined {
    return this.holds.get(id)
  }

  set(id: string, hold: PendingHold): this {
    this.holds.set(id, hold)
    let index = this.expiries.get(hold.orgId)
    if (index === undefined) {
      index = new ExpiryIndex()
      this.expiries.set(hold.orgId, index)
    }
    index.add(hold)
    return this
  }

  delete(id: string): boolean {
    return this.holds.delete(id)
  }

  clear(): void {
    this.holds.clear()
    this.expiries.clear()
  }

  /**
   * Pending holds whose organization's clock has reached their expiry, oldest first per
   * organization, at most `max`. Holds that are closing right now are skipped but stay indexed (a
   * failed close gives them back as pending); so do the holds answered, until they are deleted (an
   * expiry that fails leaves them due for the next sweep).
   */
  due(nowMs: (orgId: string) => number, max: number): PendingHold[] {
    const due: PendingHold[] = []
    const seen = new Set<PendingHold>()
    const isPending = (hold: PendingHold) => this.holds.get(hold.id) === hold
    for (const [orgId, index] of this.expiries) {
      index.collectDue(nowMs(orgId), max, isPending, seen, due)
      if (index.empty) this.expiries.delete(orgId)
      if (due.length >= max) break
    }
    return due
  }
}

interface Bucket {
  /** The bucket's holds by expiry, earliest first; those before `start` were dropped. */
  holds: PendingHold[]
  start: number
}

/** One organization's holds by expiry: buckets of `BUCKET_MS`, their numbers in a min-heap. */
class ExpiryIndex {
  private readonly buckets = new Map<number, Bucket>()
  /** The buckets' numbers, a min-heap of plain numbers: nothing in it for the collector to scan. */
  private readonly order: number[] = []

  get empty(): boolean {
    return this.order.length === 0
  }

  add(hold: PendingHold): void {
    const expiresAtMs = hold.expiresAtMs
    const number = Math.floor(expiresAtMs / BUCKET_MS)
    let bucket = this.buckets.get(number)
    if (bucket === undefined) {
      bucket = { holds: [], start: 0 }
      this.buckets.set(number, bucket)
      pushNumber(this.order, number)
    }
    const holds = bucket.holds
    let at = holds.length
    while (at > bucket.start && holds[at - 1]!.expiresAtMs > expiresAtMs) at -= 1
    if (at === holds.length) holds.push(hold)
    else holds.splice(at, 0, hold)
  }

  /**
   * Adds to `into` the holds due at `nowMs` that are still pending, not closing and not in `seen`,
   * earliest first, until `into` holds `max`. Holds no longer pending at the front of a bucket
   * are dropped; the rest stay.
   */
  collectDue(nowMs: number, max: number, isPending: (hold: PendingHold) => boolean, seen: Set<PendingHold>, into: PendingHold[]): void {
    const revisit: number[] = []
    while (this.order.length > 0 && into.length < max && this.order[0]! * BUCKET_MS <= nowMs) {
      const number = popNumber(this.order)!
      const bucket = this.buckets.get(number)!
      // The bucket is sorted: past the first hold not yet due, nothing here or in later buckets is.
      let later = false
      for (let index = bucket.start; index < bucket.holds.length && into.length < max; index++) {
        const hold = bucket.holds[index]!
        if (!isPending(hold)) {
          if (index === bucket.start) bucket.start += 1
          continue
        }
        if (hold.expiresAtMs > nowMs) {
          later = true
          break
        }
        if (hold.closing || seen.has(hold)) continue
        seen.add(hold)
        into.push(hold)
      }
      if (bucket.start >= bucket.holds.length) this.buckets.delete(number)
      else {
        if (bucket.start >= BUCKET_COMPACT_MIN && bucket.start * 2 >= bucket.holds.length) {
          bucket.holds = bucket.holds.slice(bucket.start)
          bucket.start = 0
        }
        revisit.push(number)
      }
      if (later) break
    }
    for (const number of revisit) pushNumber(this.order, number)
  }
}

function pushNumber(heap: number[], value: number): void {
  heap.push(value)
  let index = heap.length - 1
  while (index > 0) {
    const parent = (index - 1) >> 1
    if (heap[parent]! <= heap[index]!) break
    ;[heap[index], heap[parent]] = [heap[parent]!, heap[index]!]
    index = parent
  }
}

function popNumber(heap: number[]): number | undefined {
  const top = heap[0]
  const last = heap.pop()
  if (heap.length === 0 || last === undefined) return top
  heap[0] = last
  let index = 0
  for (;;) {
    const left = index * 2 + 1
    const right = left + 1
    let smallest = index
    if (left < heap.length && heap[left]! < heap[smallest]!) smallest = left
    if (right < heap.length && heap[right]! < heap[smallest]!) smallest = right
    if (smallest === index) break
    ;[heap[index], heap[smallest]] = [heap[smallest]!, heap[index]!]
    index = smallest
  }
  return top
}
