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
 * Entries are kept as numbers (`codec`) in typed arrays and made into objects only when read: a
 * ring of objects gave the collector every kept entry to trace at each full collection (the
 * benchmark's servers keep 131,072 slow authorizations, three objects each as objects: the entry,
 * its phases and its payment's id), and at each young-generation (eden) collection rescanned,
 * whole, every chunk of the ring given a new entry since the one before (one array of 131,072
 * paused each eden collection 1.56 ms on average in isolation, against 0.67 ms in chunks of 4096). Typed arrays hold nothing to trace or rescan. The ring is still
 * allocated a chunk of `chunkSize` entries at a time, so a log that is never full stays small.
 */
export class SlowLog<Entry> {
  /** The entries' numbers, `chunkSize` entries of `codec.width` numbers a chunk. */
  private readonly rows: Float64Array[] = []
  /** Where the next entry goes, 0 to capacity - 1. */
  private next = 0
  /** Entries given since the log was made, kept or since overwritten. */
  recorded = 0

  constructor(
    readonly thresholdMs: number,
    readonly capacity: number,
    private readonly codec: SlowLogCodec<Entry>,
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
    let rows = this.rows[chunkIndex]
    if (rows === undefined) {
      rows = new Float64Array(Math.min(this.chunkSize, this.capacity - chunkIndex * this.chunkSize) * this.codec.width)
      this.rows.push(rows)
    }
    this.codec.write(entry, rows, offset * this.codec.width)
    this.next = this.next + 1 === this.capacity ? 0 : this.next + 1
    this.recorded += 1
  }

  /** The sequence number of the oldest entry still kept (entries are numbered from 1 as given); `recorded + 1` while none is. */
  get oldestKept(): number {
    return this.recorded - Math.min(this.recorded, this.capacity) + 1
  }

  /**
   * At most `limit` kept entries, oldest first, each with its sequence number (the n-th entry given
   * is n): those after `after`, or, without it, the newest `limit`. Reading costs the calling thread
   * in proportion to the page, not to the log: a log of 131,072 read whole held the server's thread
   * for 357 to 633 ms (docs/architecture.md, "Where a slow authorization's time went").
   * `missed` counts the entries after `after` that were overwritten before this read; `hasMore`
   * says whether newer kept entries follow the page.
   */
  page(after: number | undefined, limit: number): { entries: Array<{ seq: number; entry: Entry }>; hasMore: boolean; missed: number } {
    const oldest = this.oldestKept
    const from = after === undefined ? Math.max(oldest, this.recorded - limit + 1) : Math.max(oldest, after + 1)
    const to = Math.min(this.recorded, from + limit - 1)
    const entries: Array<{ seq: number; entry: Entry }> = []
    for (let seq = from; seq <= to; seq++) {
      // The n-th entry given was written at position (n - 1) modulo the capacity.
      const position = (seq - 1) % this.capacity
      const chunkIndex = Math.floor(position / this.chunkSize)
      entries.push({ seq, entry: this.codec.read(this.rows[chunkIndex]!, (position - chunkIndex * this.chunkSize) * this.codec.width) })
    }
    return { entries, hasMore: to < this.recorded, missed: after === undefined ? 0 : Math.max(0, oldest - after - 1) }
  }
}
