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

/** Shared by every instance on one database: one atomic upsert per request. */
export class PostgresRateLimiter implements RateLimiter {
  private lastPurgeWindow = 0

  constructor(private readonly db: Database) {}

  async hit(bucket: string, limit: number, nowMs: number): Promise<RateDecision> {
    const windowStartMs = nowMs - (nowMs % RATE_WINDOW_MS)
    const [row] = await this.db
      .insert(rateLimitCounters)
      .values({ bucket, windowStartMs, count: 1 })
      .onConflictDoUpdate({
        target: [rateLimitCounters.bucket, rateLimitCounters.windowStartMs],
        set: { count: sql`${rateLimitCounters.count} + 1` },
      })
      .returning({ count: rateLimitCounters.count })
    if (windowStartMs !== this.lastPurgeWindow) {
      this.lastPurgeWindow = windowStartMs
      void this.db
        .delete(rateLimitCounters)
        .where(sql`${rateLimitCounters.windowStartMs} < ${windowStartMs - RATE_WINDOW_MS}`)
        .catch(() => {})
    }
    return decide(row!.count, limit, windowStartMs, nowMs)
  }
}

export function createRateLimiter(kind: 'memory' | 'postgres', db: Database): RateLimiter {
  return kind === 'postgres' ? new PostgresRateLimiter(db) : new MemoryRateLimiter()
}
