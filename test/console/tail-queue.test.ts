import { describe, expect, test } from 'bun:test'
import { TailQueue, type TailLine } from '../../console/tail-queue.ts'

/** A small deterministic generator (mulberry32), so a failing run can be replayed. */
function random(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let value = state
    value = Math.imul(value ^ (value >>> 15), value | 1)
    value ^= value + Math.imul(value ^ (value >>> 7), value | 61)
    return ((value ^ (value >>> 14)) >>> 0) / 4294967296
  }
}

/** The event log as the server serves it: ids in log order, the events after a cursor. */
function eventLog(count: number): { lines: TailLine[]; after(cursor: string | undefined, limit: number): TailLine[] } {
  const lines = Array.from({ length: count }, (_, index) => ({ id: `evt_${String(index).padStart(8, '0')}`, line: `line ${index}` }))
  const position = new Map(lines.map((entry, index) => [entry.id, index]))
  return {
    lines,
    after(cursor, limit) {
      const start = cursor === undefined ? 0 : position.get(cursor)! + 1
      return lines.slice(start, start + limit)
    },
  }
}

const WAITING_MAX = 2000
const READ_MAX = 500
const BATCH_MAX = 300

describe('the event tail queue', () => {
  test('holds at most its cap plus one read, hands the view batches of its batch cap at most, and every line once, in order, however many pass', () => {
    const next = random(73)
    const log = eventLog(100_000)
    const queue = new TailQueue(WAITING_MAX, BATCH_MAX, { filter: '', cursor: undefined })
    const shown: string[] = []
    let received: string | undefined
    let inView: number | undefined
    let waitingMost = 0
    let batchMost = 0
    while (shown.length < log.lines.length) {
      // The stream reads only while the queue has room; a read delivers up to READ_MAX events.
      if (!queue.isFull() && next() < 0.6) {
        const read = log.after(received, 1 + Math.floor(next() * READ_MAX))
        queue.push(read)
        if (read.length > 0) received = read.at(-1)!.id
      }
      waitingMost = Math.max(waitingMost, queue.size)
      // The view takes a batch on its timer and writes it on a later frame, both slower than the stream at times.
      if (next() < 0.3) {
        const batch = queue.take()
        if (batch !== undefined) {
          expect(inView).toBeUndefined()
          inView = batch.generation
          batchMost = Math.max(batchMost, batch.lines.length)
          shown.push(...batch.lines)
        }
      }
      if (inView !== undefined && next() < 0.5) {
        queue.written(inView)
        inView = undefined
      }
    }
    expect(waitingMost).toBeGreaterThanOrEqual(WAITING_MAX)
    expect(waitingMost).toBeLessThan(WAITING_MAX + READ_MAX)
    expect(batchMost).toBe(BATCH_MAX)
    expect(shown).toEqual(log.lines.map((entry) => entry.line))
  })

  test('takes no batch while the last one is not written', () => {
    const queue = new TailQueue(10, 10, { filter: '', cursor: undefined })
    queue.push([{ id: 'evt_1', line: 'one' }])
    const first = queue.take()!
    queue.push([{ id: 'evt_2', line: 'two' }])
    expect(queue.take()).toBeUndefined()
    queue.written(first.generation - 1)
    expect(queue.take()).toBeUndefined()
    queue.written(first.generation)
    expect(queue.take()!.lines).toEqual(['two'])
  })

  test('a stream stopped and started again resumes after the last line handed to the view: none lost, none twice', () => {
    const next = random(7301)
    const log = eventLog(20_000)
    const queue = new TailQueue(WAITING_MAX, BATCH_MAX, { filter: 'all', cursor: undefined })
    const shown: string[] = []
    let streaming = true
    let received = queue.follow('all')
    let inView: number | undefined
    let stops = 0
    let dropped = 0
    while (shown.length < log.lines.length) {
      if (streaming && !queue.isFull() && next() < 0.6) {
        const read = log.after(received, 1 + Math.floor(next() * 50))
        queue.push(read)
        if (read.length > 0) received = read.at(-1)!.id
      }
      if (next() < 0.3) {
        const batch = queue.take()
        if (batch !== undefined) {
          inView = batch.generation
          shown.push(...batch.lines)
        }
      }
      // A batch handed over just before a pause may be written after it: the cursor still moves past it.
      if (inView !== undefined && next() < 0.5) {
        queue.written(inView)
        inView = undefined
      }
      if (next() < 0.1) {
        if (streaming) {
          dropped += queue.size
          queue.stopped()
          stops += 1
          expect(queue.size).toBe(0)
        } else received = queue.follow('all')
        streaming = !streaming
      }
    }
    // The run did stop often, with lines waiting unshown that had to come again from the log.
    expect(stops).toBeGreaterThan(10)
    expect(dropped).toBeGreaterThan(0)
    expect(shown).toEqual(log.lines.map((entry) => entry.line))
  })

  test('a new filter starts at the end of the log, and a batch of the old one still on its way does not move its cursor', () => {
    const queue = new TailQueue(10, 10, { filter: 'treasury.*', cursor: 'evt_5' })
    expect(queue.follow('treasury.*')).toBe('evt_5')
    queue.push([{ id: 'evt_6', line: 'six' }])
    const old = queue.take()!
    queue.push([{ id: 'evt_7', line: 'seven' }])
    expect(queue.follow('operator.*')).toBeUndefined()
    expect(queue.size).toBe(0)
    queue.written(old.generation)
    expect(queue.cursor).toBeUndefined()
    queue.push([{ id: 'evt_9', line: 'nine' }])
    queue.written(queue.take()!.generation)
    expect(queue.cursor).toBe('evt_9')
    expect(queue.follow('operator.*')).toBe('evt_9')
  })

  test('takes the oldest lines first when more wait than one batch holds', () => {
    const queue = new TailQueue(10, 2, { filter: '', cursor: undefined })
    queue.push(['a', 'b', 'c'].map((line, index) => ({ id: `evt_${index}`, line })))
    const first = queue.take()!
    expect(first.lines).toEqual(['a', 'b'])
    expect(queue.size).toBe(1)
    queue.written(first.generation)
    expect(queue.cursor).toBe('evt_1')
    expect(queue.take()!.lines).toEqual(['c'])
  })

  test('refuses caps that are not positive whole numbers', () => {
    for (const cap of [0, -1, 1.5, Number.NaN]) {
      expect(() => new TailQueue(cap, 10, { filter: '', cursor: undefined })).toThrow('waitingMax')
      expect(() => new TailQueue(10, cap, { filter: '', cursor: undefined })).toThrow('batchMax')
    }
  })
})
