import { assert } from './assert.ts'

/** Entries a young segment takes before it is sealed (see `GenerationalMap`). */
const SEGMENT_SIZE_DEFAULT = 16_384

/**
 * A string-keyed map for many long-lived entries that arrive a few at a time: the pending holds a
 * server keeps until capture, release or their lapse (24 h for an authorization).
 *
 * Why not one `Map`: JavaScriptCore's young-generation (eden) collection rescans, whole, every old
 * object that was given a new object since the previous collection. One `Map` holding every pending
 * authorization, added to by each new one, is such an object at every collection, so each pause
 * grew with the number pending. In a 1000/s run with 220,000 to 250,000 pending the server's eden
 * collections paused 20.7 to 23.4 ms each on average, against about 3 ms with a few thousand; in
 * isolation, adding one entry a millisecond to a `Map` of a million cost up to 58 ms per
 * collection, and adding them to a small map beside it about 1 ms.
 *
 * Here new keys go into a young segment, sealed into the list of older segments once it holds
 * `segmentSize` entries, so a new entry makes the collector rescan at most that many. Deleting an
 * entry (a capture, a release) stores no object, so it costs the collector nothing in any
 * segment; replacing the value of a key writes only the segment that holds it.
 *
 * A lookup tries the young segment, then the sealed ones, newest first: recent entries are the
 * ones looked up most. A key greater than every key ever sealed can only be young, which makes
 * adding a new time-sorted identifier (ours are) cost one lookup however many segments there are.
 * Segments emptied by deletions are dropped, and when a segment is sealed at most two adjacent
 * pairs of sealed segments that fit in one are merged into one, so the count of segments follows
 * the live entries (about twice their number over `segmentSize` at worst) rather than every entry
 * ever added.
 */
export class GenerationalMap<V extends NonNullable<unknown>> {
  private young = new Map<string, V>()
  /** Sealed segments, oldest first. */
  private sealed: Array<Map<string, V>> = []
  private count = 0
  /** The greatest key the young segment took, and the greatest key ever sealed ('' for none). */
  private youngMax = ''
  private sealedMax = ''

  constructor(private readonly segmentSize = SEGMENT_SIZE_DEFAULT) {
    assert(Number.isInteger(segmentSize) && segmentSize >= 2, 'a segment holds at least two entries')
  }

  get size(): number {
    return this.count
  }

  /** How many segments hold entries, the young one included (for tests and diagnostics). */
  get segments(): number {
    return this.sealed.length + (this.young.size > 0 ? 1 : 0)
  }

  get(key: string): V | undefined {
    const found = this.young.get(key)
    if (found !== undefined || key > this.sealedMax) return found
    for (let index = this.sealed.length - 1; index >= 0; index--) {
      const value = this.sealed[index]!.get(key)
      if (value !== undefined) return value
    }
    return undefined
  }

  has(key: string): boolean {
    return this.get(key) !== undefined
  }

  set(key: string, value: V): this {
    const segment = this.segmentOf(key)
    if (segment !== undefined) {
      segment.set(key, value)
      return this
    }
    this.young.set(key, value)
    if (key > this.youngMax) this.youngMax = key
    this.count += 1
    if (this.young.size >= this.segmentSize) this.seal()
    return this
  }

  delete(key: string): boolean {
    const segment = this.segmentOf(key)
    if (segment === undefined) return false
    segment.delete(key)
    this.count -= 1
    if (segment !== this.young && segment.size === 0) this.sealed.splice(this.sealed.indexOf(segment), 1)
    return true
  }

  clear(): void {
    this.young = new Map()
    this.sealed = []
    this.count = 0
    this.youngMax = ''
    this.sealedMax = ''
  }

  /** Every value, oldest segment first, each segment in insertion order. */
  *values(): IterableIterator<V> {
    for (const segment of [...this.sealed, this.young]) yield* segment.values()
  }

  *entries(): IterableIterator<[string, V]> {
    for (const segment of [...this.sealed, this.young]) yield* segment.entries()
  }

  [Symbol.iterator](): IterableIterator<[string, V]> {
    return this.entries()
  }

  private segmentOf(key: string): Map<string, V> | undefined {
    if (this.young.has(key)) return this.young
    if (key > this.sealedMax) return undefined
    for (let index = this.sealed.length - 1; index >= 0; index--) {
      const segment = this.sealed[index]!
      if (segment.has(key)) return segment
    }
    return undefined
  }

  private seal(): void {
    this.sealed.push(this.young)
    this.young = new Map()
    if (this.youngMax > this.sealedMax) this.sealedMax = this.youngMax
    this.youngMax = ''
    let merges = 0
    for (let index = 0; index + 1 < this.sealed.length && merges < 2; index++) {
      const older = this.sealed[index]!
      const newer = this.sealed[index + 1]!
      if (older.size + newer.size > this.segmentSize) continue
      const merged = new Map(older)
      for (const [key, value] of newer) merged.set(key, value)
      this.sealed.splice(index, 2, merged)
      merges += 1
    }
    assert(this.sealed.reduce((sum, segment) => sum + segment.size, 0) + this.young.size === this.count, 'segments hold every entry once')
  }
}
