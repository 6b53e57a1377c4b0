import { sql } from 'drizzle-orm'
import { bulkInsert } from '../../db/bulk.ts'
import { queryPrepared, type Database } from '../../db/client.ts'
import { rateLimitCounters } from '../../db/schema/index.ts'
import { decide, decision, RATE_WINDOW_MS, type RateDecision, type RateLimiter } from './rate-limit-store.ts'

// The shared counter of the rate limits in Postgres, exact across instances, with leases of
// positions for high limits (rate-limit-store.ts has the decision and the in-memory limiter).

/** Limits below this are counted per request, exactly as without leases; from it on, instances lease positions. */
export const LEASE_LIMIT_MIN = 10_000
/** The most one instance holds of a bucket, granted and not yet used, as a share of its limit. */
export const LEASE_SHARE_MAX = 0.01
/** A lease holds about this long of the bucket's recent traffic on this instance. */
export const LEASE_HORIZON_MS = 200
/** Leases kept before those of past windows are evicted. */
const LEASES_MAX = 100_000

interface Waiting {
  bucket: string
  limit: number
  nowMs: number
  windowStartMs: number
  resolve(decision: RateDecision): void
  reject(error: unknown): void
}

/**
 * The hits of one bucket on this instance over about the last `LEASE_HORIZON_MS`: two fixed slots
 * of that length, the older weighted by how much of it still lies within the horizon. Measured on
 * the monotonic clock, whatever wall clock the caller counts windows by.
 */
class Demand {
  private slotStartMs = Number.NEGATIVE_INFINITY
  private current = 0
  private previous = 0

  record(clockMs: number): void {
    this.roll(clockMs)
    this.current += 1
  }

  estimate(clockMs: number): number {
    this.roll(clockMs)
    return this.previous * (1 - (clockMs - this.slotStartMs) / LEASE_HORIZON_MS) + this.current
  }

  private roll(clockMs: number): void {
    const elapsedMs = clockMs - this.slotStartMs
    if (elapsedMs < LEASE_HORIZON_MS) return
    const adjacent = elapsedMs < 2 * LEASE_HORIZON_MS
    this.previous = adjacent ? this.current : 0
    this.current = 0
    this.slotStartMs = adjacent ? this.slotStartMs + LEASE_HORIZON_MS : clockMs
  }
}

/**
 * Positions of one bucket in one window that this instance took from the shared counter ahead of
 * its hits. It belongs to its window and its limit: a hit of a later window, or under another limit,
 * starts a new lease and what the old one held is lost.
 */
class Lease {
  /** Granted positions not used yet; every one of them is within the limit. */
  unused = 0
  /** The shared count as this instance last read it: every position any instance has taken, refused ones too. */
  sharedCount = 0
  /** The shared count reached the limit: no position is left in this window for anyone. */
  exhausted = false
  /** `queued`: a refill waits in the batch queue; `flight`: its upsert is out. One at a time. */
  refill: 'idle' | 'queued' | 'flight' = 'idle'
  /** Positions the refill in flight asked for. */
  asking = 0
  /** Hits that found the lease empty, in arrival order; the next grant serves them first. */
  readonly waiting: Waiting[] = []

  constructor(
    readonly bucket: string,
    readonly windowStartMs: number,
    readonly limit: number,
    /** Carried from lease to lease of the bucket, so a new window starts at the bucket's pace. */
    readonly demand: Demand,
  ) {}
}

/**
 * Shared by every instance on one database, counted by an upsert into `rate_limit_counters` that adds
 * n to a (bucket, window) and returns the new count C: the n positions C-n+1 … C are this instance's,
 * handed out under Postgres' row lock, so they are unique across instances; those within the limit
 * are admitted and the rest refused. Whatever is waiting when a statement goes out is counted by one
 * statement (one row per bucket and window), so there is one round trip per batch.
 *
 * Small limits (below `LEASE_LIMIT_MIN`) are counted per request: every hit waits for its own
 * position, and exactly `limit` requests pass per window across instances.
 *
 * Large limits are leased, as production limiters do (Envoy's local-plus-global limits, quota
 * leases): a refill takes several positions at once and this instance hands them to later hits from
 * memory, so a hit that finds a position answers at once, without a round trip. When the lease runs
 * below half of its target, a refill goes out in the background (one per bucket at a time, in the
 * same batches). The target is about `LEASE_HORIZON_MS` of the bucket's recent traffic here, at most
 * `LEASE_SHARE_MAX` of the limit. A grant is exact: positions past the limit are never handed out,
 * so across all instances never more than `limit` requests pass per window. Positions a lease still
 * holds when its window ends are lost, so with several instances a bucket may be refused slightly
 * before `limit` while another instance holds an unused lease; at most `LEASE_SHARE_MAX` of the limit
 * per instance. Once the shared count reached the limit, later hits of the window are refused from
 * memory. `remaining` is the limit less the last count read here, plus the positions this instance
 * still holds: exact with one instance, an estimate across instances (others' leases count as used).
 * (Requests that cannot wait for a slow database go through `FailOpenRateLimiter`.)
 */
export class PostgresRateLimiter implements RateLimiter {
  private queue: Array<Waiting | Lease> = []
  private flushing = false
  private lastPurgeWindow = 0
  /** The current lease of each bucket with a large limit. */
  private readonly leases = new Map<string, Lease>()

  constructor(
    private readonly db: Database,
    /** At most this many hits and refills are counted per statement. */
    private readonly batchMax = 1000,
  ) {}

  hit(bucket: string, limit: number, nowMs: number): Promise<RateDecision> {
    const answer = this.decideOrWait(bucket, limit, nowMs)
    return answer instanceof Promise ? answer : Promise.resolve(answer)
  }

  /**
   * The decision itself when this instance can make it from memory (a leased position, or a window
   * known to be used up), with no timer and no promise; otherwise a promise of the shared counter's
   * answer.
   */
  decideOrWait(bucket: string, limit: number, nowMs: number): RateDecision | Promise<RateDecision> {
    const windowStartMs = nowMs - (nowMs % RATE_WINDOW_MS)
    const lease = limit >= LEASE_LIMIT_MIN ? this.leaseFor(bucket, limit, windowStartMs) : undefined
    if (lease === undefined) {
      return new Promise<RateDecision>((resolve, reject) => {
        this.queue.push({ bucket, limit, nowMs, windowStartMs, resolve, reject })
        if (!this.flushing) void this.flush()
      })
    }
    const clockMs = performance.now()
    lease.demand.record(clockMs)
    if (lease.waiting.length === 0) {
      const decision = this.fromLease(lease, nowMs, clockMs)
      if (decision !== undefined) return decision
    }
    return new Promise<RateDecision>((resolve, reject) => {
      lease.waiting.push({ bucket, limit, nowMs, windowStartMs, resolve, reject })
      this.requestRefill(lease)
    })
  }

  private leaseFor(bucket: string, limit: number, windowStartMs: number): Lease | undefined {
    const lease = this.leases.get(bucket)
    if (lease !== undefined) {
      if (lease.windowStartMs === windowStartMs && lease.limit === limit) return lease
      // A late hit of a window this instance has already left is counted on its own.
      if (lease.windowStartMs > windowStartMs) return undefined
    } else if (this.leases.size >= LEASES_MAX) {
      this.evictBefore(windowStartMs)
    }
    const fresh = new Lease(bucket, windowStartMs, limit, lease?.demand ?? new Demand())
    this.leases.set(bucket, fresh)
    return fresh
  }

  private evictBefore(windowStartMs: number): void {
    for (const [bucket, lease] of this.leases) if (lease.windowStartMs < windowStartMs) this.leases.delete(bucket)
  }

  /** A position from the lease, a refusal when the window is used up, or undefined when the hit must wait. */
  private fromLease(lease: Lease, nowMs: number, clockMs: number): RateDecision | undefined {
    if (lease.unused > 0) {
      lease.unused -= 1
      if (lease.refill === 'idle' && !lease.exhausted && lease.unused * 2 < this.targetOf(lease, clockMs)) this.requestRefill(lease)
      return decision(true, lease.limit, Math.max(0, lease.limit - lease.sharedCount) + lease.unused, lease.windowStartMs, nowMs)
    }
    if (lease.exhausted) return decision(false, lease.limit, 0, lease.windowStartMs, nowMs)
    return undefined
  }

  /** How many positions the lease should hold: the bucket's recent traffic over the horizon, within the cap. */
  private targetOf(lease: Lease, clockMs: number): number {
    const cap = Math.floor(lease.limit * LEASE_SHARE_MAX)
    return Math.min(cap, Math.max(1, Math.ceil(lease.demand.estimate(clockMs))))
  }

  private requestRefill(lease: Lease): void {
    if (lease.refill !== 'idle') return
    lease.refill = 'queued'
    this.queue.push(lease)
    if (!this.flushing) void this.flush()
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      while (this.queue.length > 0) await this.count(this.queue.splice(0, this.batchMax))
    } finally {
      this.flushing = false
    }
  }

  /** Positions each queued item takes: one per waiting hit; for a refill, its waiting hits and a top-up. */
  private positionsOf(item: Waiting | Lease): number {
    if (!(item instanceof Lease)) return 1
    const waiting = item.waiting.length
    // Only a bucket's current lease is topped up; an old one only serves the hits still waiting on it.
    const current = this.leases.get(item.bucket) === item && !item.exhausted
    const room = Math.max(0, item.limit - item.sharedCount - waiting)
    const topUp = current ? Math.min(room, Math.max(0, this.targetOf(item, performance.now()) - item.unused)) : 0
    item.asking = waiting + topUp
    item.refill = item.asking > 0 ? 'flight' : 'idle'
    return item.asking
  }

  private async count(items: Array<Waiting | Lease>): Promise<void> {
    const groups = new Map<string, { bucket: string; windowStartMs: number; positions: number; items: Array<Waiting | Lease> }>()
    for (const item of items) {
      const positions = this.positionsOf(item)
      if (positions === 0) continue
      const key = `${item.windowStartMs}|${item.bucket}`
      const group = groups.get(key)
      if (group) {
        group.positions += positions
        group.items.push(item)
      } else {
        groups.set(key, { bucket: item.bucket, windowStartMs: item.windowStartMs, positions, items: [item] })
      }
    }
    if (groups.size === 0) return
    let rows: Array<{ bucket: string; windowStartMs: number; count: number }>
    try {
      const written = await queryPrepared<{ bucket: string; window_start_ms: string; count: number }>(
        this.db,
        bulkInsert(
          rateLimitCounters,
          [...groups.values()].map((group) => ({ bucket: group.bucket, windowStartMs: group.windowStartMs, count: group.positions })),
          'on conflict (bucket, window_start_ms) do update set count = rate_limit_counters.count + excluded.count returning bucket, window_start_ms::text as window_start_ms, count',
        ),
      )
      rows = written.map((row) => ({ bucket: row.bucket, windowStartMs: Number(row.window_start_ms), count: Number(row.count) }))
    } catch (error) {
      for (const group of groups.values()) for (const item of group.items) this.fail(item, error)
      return
    }
    for (const row of rows) {
      const group = groups.get(`${row.windowStartMs}|${row.bucket}`)!
      let position = row.count - group.positions + 1
      for (const item of group.items) {
        if (item instanceof Lease) {
          this.grant(item, position, row.count)
          position += item.asking
        } else {
          item.resolve(decide(position, item.limit, item.windowStartMs, item.nowMs))
          position += 1
        }
      }
    }
    this.purgeOldWindows(items[0]!.windowStartMs)
  }

  /** The lease's positions are `first` … `first + asking - 1` of a counter now at `count`: those within the limit are granted. */
  private grant(lease: Lease, first: number, count: number): void {
    lease.unused += Math.max(0, Math.min(lease.asking, lease.limit - first + 1))
    lease.sharedCount = Math.max(lease.sharedCount, count)
    if (count >= lease.limit) lease.exhausted = true
    lease.asking = 0
    lease.refill = 'idle'
    const clockMs = performance.now()
    let served = 0
    for (; served < lease.waiting.length; served += 1) {
      const waiting = lease.waiting[served]!
      const answer = this.fromLease(lease, waiting.nowMs, clockMs)
      if (answer === undefined) break
      waiting.resolve(answer)
    }
    lease.waiting.splice(0, served)
    if (lease.waiting.length > 0) this.requestRefill(lease)
  }

  private fail(item: Waiting | Lease, error: unknown): void {
    if (!(item instanceof Lease)) {
      item.reject(error)
      return
    }
    item.asking = 0
    item.refill = 'idle'
    for (const waiting of item.waiting.splice(0)) waiting.reject(error)
  }

  private purgeOldWindows(windowStartMs: number): void {
    if (windowStartMs === this.lastPurgeWindow) return
    this.lastPurgeWindow = windowStartMs
    void this.db
      .delete(rateLimitCounters)
      .where(sql`${rateLimitCounters.windowStartMs} < ${windowStartMs - RATE_WINDOW_MS}`)
      .catch(() => {})
  }
}
