import { heapPop, heapPush } from '../lib/min-heap.ts'
import { CLOSING, type PendingHold } from './pending-hold.ts'

// The expiry index of the pending holds (pending-holds.ts): per organization, the holds by expiry
// in buckets, so the expiry sweep costs what is due, not what is pending.

/** Width of an expiry bucket: the holds expiring within the same 10 s share one bucket. */
const BUCKET_MS = 10_000
/** A bucket's entries are copied without its dropped front once that front is this long and half of them. */
const BUCKET_COMPACT_MIN = 1_024

/** What the index reads of the store it indexes (`PendingHolds`). */
export interface IndexedSlots {
  generationOf(slot: number): number
  flagsOf(slot: number): number
  view(slot: number): PendingHold
}

interface Bucket {
  /** The bucket's holds by expiry, earliest first, as slot and generation; those before `start` were dropped. */
  slots: number[]
  generations: number[]
  expiries: number[]
  start: number
}

/** One organization's holds by expiry: buckets of `BUCKET_MS`, their numbers in a min-heap. */
export class ExpiryIndex {
  private readonly buckets = new Map<number, Bucket>()
  /** The buckets' numbers, a min-heap of plain numbers. */
  private readonly order: number[] = []

  get empty(): boolean {
    return this.order.length === 0
  }

  add(slot: number, generation: number, expiresAtMs: number): void {
    const number = Math.floor(expiresAtMs / BUCKET_MS)
    let bucket = this.buckets.get(number)
    if (bucket === undefined) {
      bucket = { slots: [], generations: [], expiries: [], start: 0 }
      this.buckets.set(number, bucket)
      pushNumber(this.order, number)
    }
    const { slots, generations, expiries } = bucket
    let at = expiries.length
    while (at > bucket.start && expiries[at - 1]! > expiresAtMs) at -= 1
    if (at === expiries.length) {
      slots.push(slot)
      generations.push(generation)
      expiries.push(expiresAtMs)
    } else {
      slots.splice(at, 0, slot)
      generations.splice(at, 0, generation)
      expiries.splice(at, 0, expiresAtMs)
    }
  }

  /**
   * Adds to `into` views of the holds due at `nowMs` that are still pending, not closing and not in
   * `seen`, earliest first, until `into` holds `max`. Holds no longer pending at the front of a
   * bucket are dropped; the rest stay.
   */
  collectDue(nowMs: number, max: number, holds: IndexedSlots, seen: Set<number>, into: PendingHold[]): void {
    const revisit: number[] = []
    while (this.order.length > 0 && into.length < max && this.order[0]! * BUCKET_MS <= nowMs) {
      const number = popNumber(this.order)!
      const bucket = this.buckets.get(number)!
      // The bucket is sorted: past the first hold not yet due, nothing here or in later buckets is.
      let later = false
      for (let index = bucket.start; index < bucket.slots.length && into.length < max; index++) {
        const slot = bucket.slots[index]!
        if (holds.generationOf(slot) !== bucket.generations[index]) {
          if (index === bucket.start) bucket.start += 1
          continue
        }
        if (bucket.expiries[index]! > nowMs) {
          later = true
          break
        }
        if ((holds.flagsOf(slot) & CLOSING) !== 0 || seen.has(slot)) continue
        seen.add(slot)
        into.push(holds.view(slot))
      }
      if (bucket.start >= bucket.slots.length) this.buckets.delete(number)
      else {
        if (bucket.start >= BUCKET_COMPACT_MIN && bucket.start * 2 >= bucket.slots.length) {
          bucket.slots = bucket.slots.slice(bucket.start)
          bucket.generations = bucket.generations.slice(bucket.start)
          bucket.expiries = bucket.expiries.slice(bucket.start)
          bucket.start = 0
        }
        revisit.push(number)
      }
      if (later) break
    }
    for (const number of revisit) pushNumber(this.order, number)
  }
}

const lessNumber = (a: number, b: number) => a < b
const pushNumber = (heap: number[], value: number) => heapPush(heap, value, lessNumber)
const popNumber = (heap: number[]) => heapPop(heap, lessNumber)
