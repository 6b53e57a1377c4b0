/**
 * Counts durations into fixed buckets, cumulatively since the process started (as a Prometheus
 * histogram does): a reader takes two snapshots and subtracts them to see any window it likes, and
 * recording costs one comparison per bound, with no allocation.
 */
export class LatencyHistogram {
  /** Upper bounds in milliseconds; the last bucket holds everything slower. */
  static readonly BOUNDS_MS = [0.5, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000] as const

  private readonly counts = new Array<number>(LatencyHistogram.BOUNDS_MS.length + 1).fill(0)
  private total = 0
  private sumMs = 0
  private slowestMs = 0

  record(ms: number): void {
    const bounds = LatencyHistogram.BOUNDS_MS
    let index = 0
    while (index < bounds.length && ms > bounds[index]!) index += 1
    this.counts[index]! += 1
    this.total += 1
    this.sumMs += ms
    if (ms > this.slowestMs) this.slowestMs = ms
  }

  snapshot(): HistogramSnapshot {
    return {
      count: this.total,
      sumMs: roundTo(this.sumMs, 3),
      maxMs: roundTo(this.slowestMs, 3),
      buckets: this.counts.map((count, index) => ({ leMs: LatencyHistogram.BOUNDS_MS[index] ?? null, count })),
    }
  }
}

/** `value` rounded to `places` decimal places, as the operators' statistics show their figures. */
export function roundTo(value: number, places: number): number {
  const scale = 10 ** places
  return Math.round(value * scale) / scale
}

export interface HistogramSnapshot {
  count: number
  sumMs: number
  /** The slowest duration since the process started. */
  maxMs: number
  /** Per bucket, not cumulative: durations above the previous bound and at most `leMs` (null: above the last bound). */
  buckets: Array<{ leMs: number | null; count: number }>
}

/** What was recorded between two snapshots of the same histogram (its slowest is not known, only its bucket). */
export type HistogramWindow = Omit<HistogramSnapshot, 'maxMs'>

export function histogramBetween(before: HistogramSnapshot, after: HistogramSnapshot): HistogramWindow {
  return {
    count: after.count - before.count,
    sumMs: roundTo(after.sumMs - before.sumMs, 3),
    buckets: after.buckets.map((bucket, index) => ({ leMs: bucket.leMs, count: bucket.count - (before.buckets[index]?.count ?? 0) })),
  }
}

/** How many recorded durations were slower than `ms` (a bucket bound). */
export function countAbove(snapshot: HistogramWindow, ms: number): number {
  return snapshot.buckets.filter((bucket) => bucket.leMs === null || bucket.leMs > ms).reduce((sum, bucket) => sum + bucket.count, 0)
}

/** The bucket bound the given quantile falls under (null: above the last bound), or 0 when nothing was recorded. */
export function quantileBound(snapshot: HistogramWindow, quantile: number): number | null {
  if (snapshot.count === 0) return 0
  const rank = Math.ceil(quantile * snapshot.count)
  let seen = 0
  for (const bucket of snapshot.buckets) {
    seen += bucket.count
    if (seen >= rank) return bucket.leMs
  }
  return null
}
