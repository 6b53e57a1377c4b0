/** Entries in one chunk of a slow log's ring (see `SlowLog`). */
const CHUNK_SIZE_DEFAULT = 4096

/**
 * The most recent slow events of a kind, at most `capacity` of them: a ring that keeps the newest and
 * counts every one it was given, so a reader can tell how many it missed. What counts as slow is the
 * caller's (`thresholdMs`); the log only keeps what it is given, oldest first when read.
 *
 * The ring is held in chunks of `chunkSize` entries rather than one array, for the same reason as
 * `GenerationalMap`: JavaScriptCore's young-generation (eden) collection rescans, whole, every old
 * object that was given a new object since the previous collection. A full ring of one array is such
 * an object at every collection while entries keep coming, so each pause grows with the capacity;
 * in chunks, only the chunk being written is rescanned. The benchmark's servers keep 131,072 entries
 * (most authorizations past 1 ms): in isolation, one new entry per request into such a ring as one
 * array paused each eden collection 1.56 ms on average, against 0.67 ms in chunks of 4096
 * (README, the thirtieth machine).
 */
export class SlowLog<Entry> {
  private readonly chunks: Entry[][] = []
  /** Where the next entry goes, 0 to capacity - 1. */
  private next = 0
  /** Entries given since the log was made, kept or since overwritten. */
  recorded = 0

  constructor(
    readonly thresholdMs: number,
    readonly capacity: number,
    private readonly chunkSize = CHUNK_SIZE_DEFAULT,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`a slow log keeps at least one entry, not ${capacity}`)
    if (!Number.isInteger(chunkSize) || chunkSize < 1) throw new RangeError(`a slow log's chunk holds at least one entry, not ${chunkSize}`)
  }

  /** Whether something that took `durationMs` belongs in the log. */
  isSlow(durationMs: number): boolean {
    return durationMs >= this.thresholdMs
  }

  add(entry: Entry): void {
    const chunkIndex = Math.floor(this.next / this.chunkSize)
    const offset = this.next - chunkIndex * this.chunkSize
    let chunk = this.chunks[chunkIndex]
    if (chunk === undefined) {
      chunk = []
      this.chunks.push(chunk)
    }
    // Filled in order the first time round (kept dense), overwritten in place after.
    if (offset === chunk.length) chunk.push(entry)
    else chunk[offset] = entry
    this.next = this.next + 1 === this.capacity ? 0 : this.next + 1
    this.recorded += 1
  }

  /** The kept entries, oldest first. */
  entries(): Entry[] {
    const kept: Entry[] = []
    const held = Math.min(this.recorded, this.capacity)
    // Until the ring has wrapped the oldest entry is the first one; after, it is the next to be overwritten.
    const start = held < this.capacity ? 0 : this.next
    for (let taken = 0; taken < held; taken++) {
      const position = (start + taken) % this.capacity
      const chunkIndex = Math.floor(position / this.chunkSize)
      kept.push(this.chunks[chunkIndex]![position - chunkIndex * this.chunkSize]!)
    }
    return kept
  }
}
