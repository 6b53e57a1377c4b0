import { GenerationalMap } from '../lib/generational-map.ts'
import type { PendingHold } from './ledger.ts'

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
