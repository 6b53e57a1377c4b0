import { describe, expect, test } from 'bun:test'
import { SlowLog, type SlowLogCodec } from '../../server/lib/slow-log.ts'

/** Numbers kept as themselves, one to an entry. */
const NUMBERS: SlowLogCodec<number> = {
  width: 1,
  write: (entry, into, at) => {
    into[at] = entry
  },
  read: (from, at) => from[at]!,
}

/** One-character strings kept as their character code. */
const LETTERS: SlowLogCodec<string> = {
  width: 1,
  write: (entry, into, at) => {
    into[at] = entry.charCodeAt(0)
  },
  read: (from, at) => String.fromCharCode(from[at]!),
}

/** Everything the log keeps, oldest first: one page as large as the log. */
function kept<Entry>(log: SlowLog<Entry>): Entry[] {
  return log.page(0, log.capacity).entries.map(({ entry }) => entry)
}

describe('SlowLog', () => {
  test('keeps everything until full, oldest first', () => {
    const log = new SlowLog<number>(3, 4, NUMBERS)
    for (const value of [1, 2, 3]) log.add(value)
    expect(kept(log)).toEqual([1, 2, 3])
    expect(log.recorded).toBe(3)
  })

  test('once full, keeps the newest and still counts every entry given', () => {
    const log = new SlowLog<number>(3, 4, NUMBERS)
    for (let value = 1; value <= 10; value++) log.add(value)
    expect(kept(log)).toEqual([7, 8, 9, 10])
    expect(log.recorded).toBe(10)
    log.add(11)
    expect(kept(log)).toEqual([8, 9, 10, 11])
  })

  test('in chunks smaller than its capacity, keeps the newest in order across chunk boundaries', () => {
    // A capacity that is not a multiple of the chunk: the last chunk is short, and the ring wraps from it.
    const log = new SlowLog<number>(3, 10, NUMBERS, 4)
    for (let value = 1; value <= 7; value++) log.add(value)
    expect(kept(log)).toEqual([1, 2, 3, 4, 5, 6, 7])
    for (let value = 8; value <= 10; value++) log.add(value)
    expect(kept(log)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    log.add(11)
    expect(kept(log)).toEqual([2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    for (let value = 12; value <= 33; value++) log.add(value)
    expect(kept(log)).toEqual([24, 25, 26, 27, 28, 29, 30, 31, 32, 33])
    expect(log.recorded).toBe(33)
    // Every window of the ring's positions, against a plain array kept the same way.
    const chunked = new SlowLog<number>(3, 9, NUMBERS, 2)
    const plain: number[] = []
    for (let value = 1; value <= 40; value++) {
      chunked.add(value)
      plain.push(value)
      expect(kept(chunked)).toEqual(plain.slice(-9))
    }
  })

  test('a chunk of one entry, and a chunk larger than the capacity, keep the same', () => {
    for (const chunkSize of [1, 3, 100]) {
      const log = new SlowLog<string>(3, 3, LETTERS, chunkSize)
      for (const value of ['a', 'b', 'c', 'd', 'e']) log.add(value)
      expect(kept(log)).toEqual(['c', 'd', 'e'])
    }
    expect(() => new SlowLog<number>(3, 4, NUMBERS, 0)).toThrow(RangeError)
  })

  test('slow means at least the threshold', () => {
    const log = new SlowLog<number>(3, 1, NUMBERS)
    expect([log.isSlow(2.999), log.isSlow(3), log.isSlow(40)]).toEqual([false, true, true])
    expect(new SlowLog<number>(0, 1, NUMBERS).isSlow(0)).toBe(true)
  })

  test('refuses a capacity that keeps nothing', () => {
    expect(() => new SlowLog<number>(3, 0, NUMBERS)).toThrow(RangeError)
    expect(() => new SlowLog<number>(3, 1.5, NUMBERS)).toThrow(RangeError)
  })

  test('an entry of several numbers, nulls among them, comes back as it was given, and nothing of a full ring stays in the collector\'s heap', async () => {
    const { heapStats } = await import('bun:jsc')
    interface Pair {
      at: number
      took: number | null
    }
    const codec: SlowLogCodec<Pair> = {
      width: 2,
      write: (entry, into, at) => {
        into[at] = entry.at
        into[at + 1] = entry.took ?? Number.NaN
      },
      read: (from, at) => ({ at: from[at]!, took: Number.isNaN(from[at + 1]!) ? null : from[at + 1]! }),
    }
    for (const [capacity, chunkSize] of [[10, 4], [9, 2], [3, 100], [1, 1]] as const) {
      const log = new SlowLog<Pair>(3, capacity, codec, chunkSize)
      const given: Pair[] = []
      for (let value = 1; value <= 40; value++) {
        const entry = { at: value, took: value % 3 === 0 ? null : value / 8 }
        log.add(entry)
        given.push(entry)
        expect(kept(log)).toEqual(given.slice(-capacity))
      }
      expect(log.recorded).toBe(40)
    }
    const full = new SlowLog<Pair>(3, 50_000, codec, 4096)
    Bun.gc(true)
    const before = heapStats().objectCount
    for (let value = 0; value < 100_000; value++) full.add({ at: value, took: value })
    Bun.gc(true)
    expect(heapStats().objectCount - before).toBeLessThan(100)
    expect(kept(full).at(-1)).toEqual({ at: 99_999, took: 99_999 })
  })

  test('a page: the newest without a cursor, then those after a seq, each numbered in the order given', () => {
    const log = new SlowLog<number>(3, 10, NUMBERS, 4)
    expect(log.page(undefined, 5)).toEqual({ entries: [], hasMore: false, missed: 0 })
    expect(log.oldestKept).toBe(1)
    for (let value = 1; value <= 7; value++) log.add(value * 10)
    const seqs = (page: { entries: Array<{ seq: number; entry: number }> }) => page.entries.map(({ seq, entry }) => [seq, entry])
    // Without a cursor: the newest, oldest first.
    expect(seqs(log.page(undefined, 3))).toEqual([[5, 50], [6, 60], [7, 70]])
    expect(log.page(undefined, 3).hasMore).toBe(false)
    expect(seqs(log.page(undefined, 100))).toEqual([1, 2, 3, 4, 5, 6, 7].map((seq) => [seq, seq * 10]))
    // Paged from the start: each page's last seq reads the next.
    const first = log.page(0, 3)
    expect([seqs(first), first.hasMore, first.missed]).toEqual([[[1, 10], [2, 20], [3, 30]], true, 0])
    expect(seqs(log.page(3, 3))).toEqual([[4, 40], [5, 50], [6, 60]])
    const last = log.page(6, 3)
    expect([seqs(last), last.hasMore]).toEqual([[[7, 70]], false])
    expect(log.page(7, 3)).toEqual({ entries: [], hasMore: false, missed: 0 })
  })

  test('a cursor older than the ring starts at the oldest kept and counts what was overwritten', () => {
    const log = new SlowLog<number>(3, 4, NUMBERS, 3)
    for (let value = 1; value <= 11; value++) log.add(value)
    // Kept: seq 8 to 11 (the n-th entry given is n here).
    expect(log.oldestKept).toBe(8)
    const page = log.page(2, 2)
    expect(page.entries).toEqual([{ seq: 8, entry: 8 }, { seq: 9, entry: 9 }])
    expect([page.hasMore, page.missed]).toEqual([true, 5])
    expect(log.page(7, 10)).toEqual({ entries: [8, 9, 10, 11].map((n) => ({ seq: n, entry: n })), hasMore: false, missed: 0 })
    // Paging through a ring that wraps, every entry comes once and in order.
    const chunked = new SlowLog<number>(3, 9, NUMBERS, 2)
    for (let value = 1; value <= 40; value++) chunked.add(value)
    const read: number[] = []
    let after = 0
    for (;;) {
      const next = chunked.page(after, 4)
      read.push(...next.entries.map(({ entry }) => entry))
      if (!next.hasMore) break
      after = next.entries.at(-1)!.seq
    }
    expect(read).toEqual([32, 33, 34, 35, 36, 37, 38, 39, 40])
  })
})
