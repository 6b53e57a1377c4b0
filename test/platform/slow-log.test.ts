import { describe, expect, test } from 'bun:test'
import { SlowLog } from '../../server/lib/slow-log.ts'

describe('SlowLog', () => {
  test('keeps everything until full, oldest first', () => {
    const log = new SlowLog<number>(3, 4)
    for (const value of [1, 2, 3]) log.add(value)
    expect(log.entries()).toEqual([1, 2, 3])
    expect(log.recorded).toBe(3)
  })

  test('once full, keeps the newest and still counts every entry given', () => {
    const log = new SlowLog<number>(3, 4)
    for (let value = 1; value <= 10; value++) log.add(value)
    expect(log.entries()).toEqual([7, 8, 9, 10])
    expect(log.recorded).toBe(10)
    log.add(11)
    expect(log.entries()).toEqual([8, 9, 10, 11])
  })

  test('slow means at least the threshold', () => {
    const log = new SlowLog<number>(3, 1)
    expect([log.isSlow(2.999), log.isSlow(3), log.isSlow(40)]).toEqual([false, true, true])
    expect(new SlowLog<number>(0, 1).isSlow(0)).toBe(true)
  })

  test('refuses a capacity that keeps nothing', () => {
    expect(() => new SlowLog<number>(3, 0)).toThrow(RangeError)
    expect(() => new SlowLog<number>(3, 1.5)).toThrow(RangeError)
  })
})
