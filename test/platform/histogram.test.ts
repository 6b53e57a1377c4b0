import { describe, expect, test } from 'bun:test'
import { countAbove, histogramBetween, LatencyHistogram, quantileBound } from '../../server/lib/histogram.ts'

describe('latency histogram', () => {
  test('counts each duration in the first bucket whose bound holds it; a bound is inclusive, the last bucket open', () => {
    const histogram = new LatencyHistogram()
    for (const ms of [0.1, 0.5, 0.51, 3, 3.2, 999, 1000, 1000.5, 60_000]) histogram.record(ms)
    const snapshot = histogram.snapshot()
    const at = (leMs: number | null) => snapshot.buckets.find((bucket) => bucket.leMs === leMs)!.count
    expect(snapshot.count).toBe(9)
    expect(snapshot.maxMs).toBe(60_000)
    expect(at(0.5)).toBe(2)
    expect(at(1)).toBe(1)
    expect(at(3)).toBe(1)
    expect(at(5)).toBe(1)
    expect(at(1000)).toBe(2)
    expect(at(null)).toBe(2)
    expect(snapshot.buckets.reduce((sum, bucket) => sum + bucket.count, 0)).toBe(9)
  })

  test('a window is the difference of two snapshots; its counts above a bound and its quantile bucket come from it alone', () => {
    const histogram = new LatencyHistogram()
    for (let index = 0; index < 100; index++) histogram.record(150)
    const before = histogram.snapshot()
    for (let index = 0; index < 98; index++) histogram.record(0.4)
    histogram.record(4)
    histogram.record(30)
    const window = histogramBetween(before, histogram.snapshot())
    expect(window.count).toBe(100)
    expect(window.sumMs).toBeCloseTo(98 * 0.4 + 34, 6)
    expect(countAbove(window, 3)).toBe(2)
    expect(countAbove(window, 20)).toBe(1)
    expect(countAbove(window, 100)).toBe(0)
    expect(quantileBound(window, 0.5)).toBe(0.5)
    expect(quantileBound(window, 0.99)).toBe(5)
    expect(quantileBound(window, 1)).toBe(50)
    expect(quantileBound(histogramBetween(before, before), 0.99)).toBe(0)
  })
})
