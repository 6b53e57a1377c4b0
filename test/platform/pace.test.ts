import { describe, expect, test } from 'bun:test'
import { Pace } from '../../server/lib/pace.ts'

describe('pace (operations over time, from moving averages of each)', () => {
  test('no rate before a sample with time', () => {
    const pace = new Pace(0.2)
    expect(pace.perMs).toBe(0)
    pace.record(3, 0)
    expect(pace.perMs).toBe(0)
    pace.record(4, 2)
    expect(pace.perMs).toBe(2)
  })

  test('answers read in pairs count as two operations in the pair’s time, not as the fast one’s rate', () => {
    // Two batches of one operation answered in one turn of the loop every 10 ms: the first after
    // 9.99 ms by the clock, the second 0.01 ms after it. The writer commits 0.2 a millisecond.
    const pace = new Pace(0.2)
    for (let pair = 0; pair < 50; pair++) {
      pace.record(1, 9.99)
      pace.record(1, 0.01)
    }
    // An average of each sample's own rate (the second one's time clamped to 0.1 ms) would settle
    // near 2 a millisecond, ten times the real pace.
    expect(pace.perMs).toBeGreaterThan(0.15)
    expect(pace.perMs).toBeLessThan(0.3)
  })

  test('follows a change of pace within a few samples', () => {
    const pace = new Pace(0.2)
    for (let batch = 0; batch < 20; batch++) pace.record(40, 4)
    expect(pace.perMs).toBeCloseTo(10, 5)
    // The writer slows to a tenth (the database is starved of a core): 40 operations in 40 ms.
    for (let batch = 0; batch < 15; batch++) pace.record(40, 40)
    expect(pace.perMs).toBeLessThan(1.2)
  })
})
