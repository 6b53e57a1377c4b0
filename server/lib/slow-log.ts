/** Entries in one chunk of a slow log's ring (see `SlowLog`). */
const CHUNK_SIZE_DEFAULT = 4096

/**
 * How a slow log keeps its entries as numbers (`SlowLog`): `width` numbers per entry, written and
 * read back at `at` in a Float64Array.
 */
export interface SlowLogCodec<Entry> {
  width: number
  write(entry: Entry, into: Float64Array, at: number): void
  read(from: Float64Array, at: number): Entry
}

/**
 * The most recent slow events of a kind, at most `capacity` of them: a ring that keeps the newest and
 * counts every one it was given, so a reader can tell how many it missed. What counts as slow is the
 * caller's (`thresholdMs`); the log only keeps what it is given, oldest first when read.
 *
 * The ring is held in chunks of `chunkSize` entries rather than one array: JavaScriptCore's
 * young-generation (eden) collection rescans, whole, every old object that was given a new object
 * since the previous collection (one `Map` of every pending hold, added to by each authorization,
 * once paused each eden collection 20.7 to 23.4 ms with 220,000 to 250,000 pending). A full ring
 * of one array is such an object at every collection while entries keep coming, so each pause
 * grows with the capacity; in chunks, only the chunk being written is rescanned. The benchmark's
 * servers keep 131,072 entries (most authorizations past 1 ms): in isolation, one new entry per
 * request into such a ring as one array paused each eden collection 1.56 ms on average, against
 * 0.67 ms in chunks of 4096 (README, the thirtieth machine).
 *
 * With a `codec`, entries are kept as numbers in typed arrays and made into objects only when read:
 * nothing of them for the collector to trace. The slow authorizations' log does so: kept as
 * objects, its 131,072 entries in a benchmark's server were three objects each (the entry, its
 * phases and its payment's id), as many as every pending hold had been.
 */
export class SlowLog<Entry> {
  private readonly chunks: Entry[][] = []
  /** With a codec: the entries' numbers, `chunkSize` entries of `codec.width` numbers a chunk. */
  private readonly rows: Float64Array[] = []
  /** Where the next entry goes, 0 to capacity - 1. */
  private next = 0
  /** Entries given since the log was made, kept or since overwritten. */
  recorded = 0

  constructor(
    readonly thresholdMs: number,
    readonly capacity: number,
    private readonly chunkSize = CHUNK_SIZE_DEFAULT,
    private readonly codec?: SlowLogCodec<Entry>,
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
    if (this.codec !== undefined) {
      let rows = this.rows[chunkIndex]
      if (rows === undefined) {
        rows = new Float64Array(Math.min(this.chunkSize, this.capacity - chunkIndex * this.chunkSize) * this.codec.width)
        this.rows.push(rows)
      }
      this.codec.write(entry, rows, offset * this.codec.width)
      this.next = this.next + 1 === this.capacity ? 0 : this.next + 1
      this.recorded += 1
      return
    }
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
      const offset = position - chunkIndex * this.chunkSize
      kept.push(this.codec === undefined ? this.chunks[chunkIndex]![offset]! : this.codec.read(this.rows[chunkIndex]!, offset * this.codec.width))
    }
    return kept
  }
}
