import { logFailure } from '../lib/log.ts'
import { PROCESS_CLOCK_KEEPING_ALIVE, within, type MonotonicClock } from '../lib/monotonic-clock.ts'

export const RATE_WINDOW_MS = 60_000

export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /** Whole seconds until the current window ends. */
  retryAfterSeconds: number
}

/**
 * Fixed 60-second windows. Every request takes a position in its bucket's count and is admitted when
 * the position is within the limit, so never more than `limit` requests pass per window, however many
 * instances share the store (with large limits on several instances, slightly fewer may; see
 * `PostgresRateLimiter`).
 */
export interface RateLimiter {
  hit(bucket: string, limit: number, nowMs: number, options?: HitOptions): Promise<RateDecision>
}

export interface HitOptions {
  /** The request answers within a budget: wait at most this long for a shared counter. */
  waitMs?: number
}

export function decision(allowed: boolean, limit: number, remaining: number, windowStartMs: number, nowMs: number): RateDecision {
  return { allowed, limit, remaining, retryAfterSeconds: Math.max(1, Math.ceil((windowStartMs + RATE_WINDOW_MS - nowMs) / 1000)) }
}

/** The decision for the hit that took position `count` of its window. */
export function decide(count: number, limit: number, windowStartMs: number, nowMs: number): RateDecision {
  return decision(count <= limit, limit, Math.max(0, limit - count), windowStartMs, nowMs)
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

/** After the shared counter kept a bounded request waiting too long, such requests are counted locally for this long. */
export const SHARED_STORE_COOLDOWN_MS = 1_000

/** A limiter that can sometimes decide from memory (see `PostgresRateLimiter.decideOrWait`). */
export interface SharedRateLimiter extends RateLimiter {
  decideOrWait?(bucket: string, limit: number, nowMs: number): RateDecision | Promise<RateDecision>
}

/**
 * The shared store, failing open for requests that cannot wait: a request that names `waitMs`
 * (an authorization with its 500 ms budget) is counted in this instance's memory, with the same
 * limit, when the database does not answer the counter in time (stalled or unreachable), as
 * Envoy's and Stripe's limiters fail open; and for a cooldown after that, such requests skip the
 * shared store so a dead database does not collect a queue of counter updates. Every other request
 * waits for the shared counter as before, so counting stays exact across instances. A hit the
 * shared store answers from memory (a leased position) costs no timer.
 *
 * Once the cooldown is over, no request waits to find out whether the database is back (as a
 * circuit breaker's half-open state): one request's hit goes to the shared counter as a probe while
 * that request, and every other one meanwhile, is still counted here. A probe answered within the
 * wait brings requests back to the shared counter; one that is not starts another cooldown. Why:
 * with the database refusing connections, the driver's reconnects back off between refusals, so
 * the first request after each cooldown waited out its whole 150 ms for the counter, once a second
 * (an outage run's declines, p99 150 ms; 3.7 ms with the counter in memory). The probing request is
 * counted in both places, so a bucket may be refused one position early per cooldown, never late.
 */
export class FailOpenRateLimiter implements RateLimiter {
  private readonly local = new MemoryRateLimiter()
  private sharedUnavailableUntil = 0
  /** The shared counter failed a bounded request: such requests are counted here until a probe succeeds. */
  private tripped = false
  private probing = false

  constructor(
    private readonly shared: SharedRateLimiter,
    private readonly cooldownMs = SHARED_STORE_COOLDOWN_MS,
    /** What the cooldown and each request's wait are timed on: the process's, or a test's. */
    private readonly clock: MonotonicClock = PROCESS_CLOCK_KEEPING_ALIVE,
  ) {}

  hit(bucket: string, limit: number, nowMs: number, options?: HitOptions): Promise<RateDecision> {
    const waitMs = options?.waitMs
    if (waitMs === undefined) return this.shared.hit(bucket, limit, nowMs)
    if (this.tripped) {
      if (!this.probing && this.clock.now() >= this.sharedUnavailableUntil) void this.probe(bucket, limit, nowMs, waitMs)
      return this.local.hit(bucket, limit, nowMs)
    }
    const answer = this.askShared(bucket, limit, nowMs)
    if (!(answer instanceof Promise)) return Promise.resolve(answer)
    return this.within(answer, waitMs, bucket, limit, nowMs)
  }

  private async within(answer: Promise<RateDecision>, waitMs: number, bucket: string, limit: number, nowMs: number): Promise<RateDecision> {
    const counted = await within(this.clock, waitMs, answer.catch(() => undefined))
    if (counted !== undefined) return counted
    this.trip()
    // Every request waiting on the counter times out at about the same moment: one line a second,
    // with a count of the rest, not one per request (60,196 lines in one benchmark run past capacity,
    // each a synchronous write on the thread that was already late).
    logFailure('rate-limit.shared-timeout', `rate limit: the shared counter did not answer within ${waitMs} ms; requests that cannot wait are counted in this instance for ${this.cooldownMs} ms`)
    return this.local.hit(bucket, limit, nowMs)
  }

  /** The shared counter's decision: at once when a leased position answers it, else its promise. */
  private askShared(bucket: string, limit: number, nowMs: number): RateDecision | Promise<RateDecision> {
    return this.shared.decideOrWait ? this.shared.decideOrWait(bucket, limit, nowMs) : this.shared.hit(bucket, limit, nowMs)
  }

  /** Bounded requests are being counted in this instance (the shared counter failed one; no probe has succeeded since). */
  get failingOpen(): boolean {
    return this.tripped
  }

  private trip(): void {
    this.tripped = true
    this.sharedUnavailableUntil = this.clock.now() + this.cooldownMs
  }

  /** One hit on the shared counter, in the background, for a request already counted here. */
  private async probe(bucket: string, limit: number, nowMs: number, waitMs: number): Promise<void> {
    this.probing = true
    try {
      const answer = this.askShared(bucket, limit, nowMs)
      if (!(answer instanceof Promise)) {
        this.tripped = false
        return
      }
      if ((await within(this.clock, waitMs, answer.catch(() => undefined))) !== undefined) this.tripped = false
      else this.trip()
    } catch {
      this.trip()
    } finally {
      this.probing = false
    }
  }
}
