import { sql } from 'drizzle-orm'
import { bulkInsert } from '../../db/bulk.ts'
import { queryPrepared, type Database } from '../../db/client.ts'
import { rateLimitCounters } from '../../db/schema/index.ts'

export const RATE_WINDOW_MS = 60_000

export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /** Whole seconds until the current window ends. */
  retryAfterSeconds: number
}

/**
 * Fixed 60-second windows. Every request increments its bucket's counter and is admitted when the
 * count after the increment is within the limit, so exactly `limit` requests pass per window no
 * matter how many instances share the store.
 */
export interface RateLimiter {
  hit(bucket: string, limit: number, nowMs: number, options?: HitOptions): Promise<RateDecision>
}

export interface HitOptions {
  /** The request answers within a budget: wait at most this long for a shared counter. */
  waitMs?: number
}

function decide(count: number, limit: number, windowStartMs: number, nowMs: number): RateDecision {
  return {
    allowed: count <= limit,
    limit,
    remaining: Math.max(0, limit - count),
    retryAfterSeconds: Math.max(1, Math.ceil((windowStartMs + RATE_WINDOW_MS - nowMs) / 1000)),
  }
}

/** For a single instance: counters in process memory. */
export class MemoryRateLimiter implements RateLimiter {
  private readonly windows = new Map<string, { windowStartMs: number; count: number }>()

  async hit(bucket: string, limit: number, nowMs: number): Promise<RateDecision> {
    const windowStartMs = nowMs - (nowMs % RATE_WINDOW_MS)
    let entry = this.windows.get(bucket)
    if (entry === undefined || entry.windowStartMs !== windowStartMs) {
      if (this.windows.size > 100_000) this.evictBefore(windowStartMs)
      entry = { windowStartMs, count: 0 }
      this.windows.set(bucket, entry)
    }
    entry.count += 1
    return decide(entry.count, limit, windowStartMs, nowMs)
  }

  private evictBefore(windowStartMs: number): void {
    for (const [bucket, entry] of this.windows) if (entry.windowStartMs < windowStartMs) this.windows.delete(bucket)
  }
}

interface Waiting {
  bucket: string
  limit: number
  nowMs: number
  windowStartMs: number
  resolve(decision: RateDecision): void
  reject(error: unknown): void
}

/**
 * Shared by every instance on one database. Requests that arrive while a count is in flight are
 * coalesced: one upsert adds n to each (bucket, window) and returns the new count C, and the n
 * waiters take the positions C-n+1 … C in arrival order. Positions are handed out under Postgres'
 * row lock, so they are unique across instances and exactly `limit` requests pass per window, at a
 * cost of one round trip per batch instead of one per request. (Requests that cannot wait for a
 * slow database go through `FailOpenRateLimiter`.)
 */
export class PostgresRateLimiter implements RateLimiter {
  private queue: Waiting[] = []
  private flushing = false
  private lastPurgeWindow = 0

  constructor(
    private readonly db: Database,
    /** At most this many requests are counted per statement. */
    private readonly batchMax = 1000,
  ) {}

  hit(bucket: string, limit: number, nowMs: number): Promise<RateDecision> {
    const windowStartMs = nowMs - (nowMs % RATE_WINDOW_MS)
    return new Promise<RateDecision>((resolve, reject) => {
      this.queue.push({ bucket, limit, nowMs, windowStartMs, resolve, reject })
      if (!this.flushing) void this.flush()
    })
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      while (this.queue.length > 0) await this.count(this.queue.splice(0, this.batchMax))
    } finally {
      this.flushing = false
    }
  }

  private async count(batch: Waiting[]): Promise<void> {
    const groups = new Map<string, Waiting[]>()
    for (const waiting of batch) {
      const key = `${waiting.windowStartMs}|${waiting.bucket}`
      const group = groups.get(key)
      if (group) group.push(waiting)
      else groups.set(key, [waiting])
    }
    let rows: Array<{ bucket: string; windowStartMs: number; count: number }>
    try {
      const written = await queryPrepared<{ bucket: string; window_start_ms: string; count: number }>(
        this.db,
        bulkInsert(
          rateLimitCounters,
          [...groups.values()].map((group) => ({ bucket: group[0]!.bucket, windowStartMs: group[0]!.windowStartMs, count: group.length })),
          'on conflict (bucket, window_start_ms) do update set count = rate_limit_counters.count + excluded.count returning bucket, window_start_ms::text as window_start_ms, count',
        ),
      )
      rows = written.map((row) => ({ bucket: row.bucket, windowStartMs: Number(row.window_start_ms), count: Number(row.count) }))
    } catch (error) {
      for (const waiting of batch) waiting.reject(error)
      return
    }
    for (const row of rows) {
      const group = groups.get(`${row.windowStartMs}|${row.bucket}`)!
      const first = row.count - group.length + 1
      group.forEach((waiting, index) => waiting.resolve(decide(first + index, waiting.limit, waiting.windowStartMs, waiting.nowMs)))
    }
    this.purgeOldWindows(batch[0]!.windowStartMs)
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

/** After the shared counter kept a bounded request waiting too long, such requests are counted locally for this long. */
export const SHARED_STORE_COOLDOWN_MS = 1_000

/**
 * The shared store, failing open for requests that cannot wait: a request that names `waitMs`
 * (an authorization with its 500 ms budget) is counted in this instance's memory, with the same
 * limit, when the database does not answer the counter in time (stalled or unreachable), as
 * Envoy's and Stripe's limiters fail open; and for a cooldown after that, such requests skip the
 * shared store so a dead database does not collect a queue of counter updates. Every other request
 * waits for the shared counter as before, so counting stays exact across instances.
 */
export class FailOpenRateLimiter implements RateLimiter {
  private readonly local = new MemoryRateLimiter()
  private sharedUnavailableUntil = 0

  constructor(
    private readonly shared: RateLimiter,
    private readonly cooldownMs = SHARED_STORE_COOLDOWN_MS,
  ) {}

  async hit(bucket: string, limit: number, nowMs: number, options: HitOptions = {}): Promise<RateDecision> {
    const waitMs = options.waitMs
    if (waitMs === undefined) return this.shared.hit(bucket, limit, nowMs)
    if (performance.now() < this.sharedUnavailableUntil) return this.local.hit(bucket, limit, nowMs)
    let timer: ReturnType<typeof setTimeout> | undefined
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), waitMs)
    })
    const decision = await Promise.race([this.shared.hit(bucket, limit, nowMs).catch(() => undefined), late])
    clearTimeout(timer)
    if (decision !== undefined) return decision
    this.sharedUnavailableUntil = performance.now() + this.cooldownMs
    console.error(`rate limit: the shared counter did not answer within ${waitMs} ms; requests that cannot wait are counted in this instance for ${this.cooldownMs} ms`)
    return this.local.hit(bucket, limit, nowMs)
  }
}

export function createRateLimiter(kind: 'memory' | 'postgres', db: Database): RateLimiter {
  return kind === 'postgres' ? new FailOpenRateLimiter(new PostgresRateLimiter(db)) : new MemoryRateLimiter()
}
