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

describe('SlowLog', () => {
  test('keeps everything until full, oldest first', () => {
    const log = new SlowLog<number>(3, 4, NUMBERS)
    for (const value of [1, 2, 3]) log.add(value)
    expect(log.entries()).toEqual([1, 2, 3])
    expect(log.recorded).toBe(3)
  })

  test('once full, keeps the newest and still counts every entry given', () => {
    const log = new SlowLog<number>(3, 4, NUMBERS)
    for (let value = 1; value <= 10; value++) log.add(value)
    expect(log.entries()).toEqual([7, 8, 9, 10])
    expect(log.recorded).toBe(10)
    log.add(11)
    expect(log.entries()).toEqual([8, 9, 10, 11])
  })

  test('in chunks smaller than its capacity, keeps the newest in order across chunk boundaries', () => {
    // A capacity that is not a multiple of the chunk: the last chunk is short, and the ring wraps from it.
    const log = new SlowLog<number>(3, 10, NUMBERS, 4)
    for (let value = 1; value <= 7; value++) log.add(value)
    expect(log.entries()).toEqual([1, 2, 3, 4, 5, 6, 7])
    for (let value = 8; value <= 10; value++) log.add(value)
    expect(log.entries()).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    log.add(11)
    expect(log.entries()).toEqual([2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    for (let value = 12; value <= 33; value++) log.add(value)
    expect(log.entries()).toEqual([24, 25, 26, 27, 28, 29, 30, 31, 32, 33])
    expect(log.recorded).toBe(33)
    // Every window of the ring's positions, against a plain array kept the same way.
    const chunked = new SlowLog<number>(3, 9, NUMBERS, 2)
    const plain: number[] = []
    for (let value = 1; value <= 40; value++) {
      chunked.add(value)
      plain.push(value)
      expect(chunked.entries()).toEqual(plain.slice(-9))
    }
  })

  test('a chunk of one entry, and a chunk larger than the capacity, keep the same', () => {
    for (const chunkSize of [1, 3, 100]) {
      const log = new SlowLog<string>(3, 3, LETTERS, chunkSize)
      for (const value of ['a', 'b', 'c', 'd', 'e']) log.add(value)
      expect(log.entries()).toEqual(['c', 'd', 'e'])
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
        expect(log.entries()).toEqual(given.slice(-capacity))
      }
      expect(log.recorded).toBe(40)
    }
    const full = new SlowLog<Pair>(3, 50_000, codec, 4096)
    Bun.gc(true)
    const before = heapStats().objectCount
    for (let value = 0; value < 100_000; value++) full.add({ at: value, took: value })
    Bun.gc(true)
    expect(heapStats().objectCount - before).toBeLessThan(100)
    expect(full.entries().at(-1)).toEqual({ at: 99_999, took: 99_999 })
  })
})
