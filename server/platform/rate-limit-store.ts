import { sql } from 'drizzle-orm'
import type { Database } from '../../db/client.ts'
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
  hit(bucket: string, limit: number, nowMs: number): Promise<RateDecision>
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
    return this.hitNow(bucket, limit, nowMs)
  }

  hitNow(bucket: string, limit: number, nowMs: number): RateDecision {
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
  settled: boolean
  resolve(decision: RateDecision): void
}

export interface PostgresRateLimiterOptions {
  /**
   * How long a request waits for the shared counter before it is counted in this instance's memory
   * instead. Keeps every request (and the authorization budget) bounded while Postgres is slow
   * or unreachable.
   */
  answerWithinMs: number
  /** At most this many requests are counted per statement. */
  batchMax: number
}

/**
 * Shared by every instance on one database. Requests that arrive while a count is in flight are
 * coalesced: one upsert adds n to each (bucket, window) and returns the new count C, and the n
 * waiters take the positions C-n+1 … C in arrival order. Positions are handed out by Postgres'
 * row lock, so they are unique across instances and exactly `limit` requests pass per window, at a
 * cost of one round trip per batch instead of one per request.
 *
 * If the shared counter does not answer in time (Postgres slow or down), the request is counted in
 * this instance's memory for the current window and the degradation is logged: each instance then
 * admits up to the limit on its own until the database answers again. A waiter already answered
 * from memory is not counted again in Postgres.
 */
export class PostgresRateLimiter implements RateLimiter {
  private queue: Waiting[] = []
  private flushing = false
  /** When the statement now in flight was sent (`performance.now()`). */
  private flushSentAt = 0
  private lastPurgeWindow = 0
  private readonly fallback = new MemoryRateLimiter()
  private fallbackLoggedAtMs = 0

  constructor(
    private readonly db: Database,
    private readonly options: PostgresRateLimiterOptions = { answerWithinMs: 250, batchMax: 1000 },
  ) {}

  hit(bucket: string, limit: number, nowMs: number): Promise<RateDecision> {
    const windowStartMs = nowMs - (nowMs % RATE_WINDOW_MS)
    if (this.flushing && performance.now() - this.flushSentAt > this.options.answerWithinMs) {
      // The counter is already known to be stuck: do not make this request wait to find out again.
      return Promise.resolve(this.countInMemory(bucket, limit, nowMs, 'the shared counter has not answered for a while'))
    }
    return new Promise<RateDecision>((resolve) => {
      const waiting: Waiting = { bucket, limit, nowMs, windowStartMs, settled: false, resolve }
      const timer = setTimeout(() => this.answerFromMemory(waiting, 'the shared counter did not answer in time'), this.options.answerWithinMs)
      waiting.resolve = (decision) => {
        clearTimeout(timer)
        resolve(decision)
      }
      this.queue.push(waiting)
      if (!this.flushing) void this.flush()
    })
  }

  private answerFromMemory(waiting: Waiting, reason: string): void {
    if (waiting.settled) return
    waiting.settled = true
    waiting.resolve(this.countInMemory(waiting.bucket, waiting.limit, waiting.nowMs, reason))
  }

  private countInMemory(bucket: string, limit: number, nowMs: number, reason: string): RateDecision {
    if (nowMs - this.fallbackLoggedAtMs > 10_000) {
      this.fallbackLoggedAtMs = nowMs
      console.error(`rate limit: ${reason}; counting in this instance's memory until Postgres answers again`)
    }
    return this.fallback.hitNow(bucket, limit, nowMs)
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.options.batchMax).filter((waiting) => !waiting.settled)
        if (batch.length === 0) continue
        this.flushSentAt = performance.now()
        await this.count(batch)
      }
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
      rows = await this.db
        .insert(rateLimitCounters)
        .values([...groups.values()].map((group) => ({ bucket: group[0]!.bucket, windowStartMs: group[0]!.windowStartMs, count: group.length })))
        .onConflictDoUpdate({
          target: [rateLimitCounters.bucket, rateLimitCounters.windowStartMs],
          set: { count: sql`${rateLimitCounters.count} + excluded.count` },
        })
        .returning({ bucket: rateLimitCounters.bucket, windowStartMs: rateLimitCounters.windowStartMs, count: rateLimitCounters.count })
    } catch (error) {
      for (const waiting of batch) this.answerFromMemory(waiting, `the shared counter failed (${(error as Error).message})`)
      return
    }
    for (const row of rows) {
      const group = groups.get(`${row.windowStartMs}|${row.bucket}`)!
      const first = row.count - group.length + 1
      group.forEach((waiting, index) => {
        if (waiting.settled) return
        waiting.settled = true
        waiting.resolve(decide(first + index, waiting.limit, waiting.windowStartMs, waiting.nowMs))
      })
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

export function createRateLimiter(kind: 'memory' | 'postgres', db: Database): RateLimiter {
  return kind === 'postgres' ? new PostgresRateLimiter(db) : new MemoryRateLimiter()
}
