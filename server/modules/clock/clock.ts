import { eq, sql } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { orgClocks } from '../../../db/schema/index.ts'

/** Work that is due by an organization's new time (confirmations, timelocks), run right after its clock moves. */
export type AdvanceListener = (orgId: string, now: Date) => Promise<void>

/**
 * Every time-based rule reads this clock. In sandbox an organization's clock can be moved ahead
 * (Stripe's test clocks); the offset is kept in the database and cached here, and other instances
 * hear of a change by NOTIFY.
 */
export class Clock {
  private readonly offsets = new Map<string, number>()
  private readonly advanceListeners: AdvanceListener[] = []

  constructor(
    private readonly db: Database,
    private readonly wallClockMs: () => number = Date.now,
  ) {}

  async load(): Promise<void> {
    const rows = await this.db.select().from(orgClocks)
    for (const row of rows) this.moveTo(row.orgId, row.offsetMs)
  }

  /** Takes the database's offset (another instance advanced the clock, told by NOTIFY). */
  async refresh(orgId: string): Promise<void> {
    const [row] = await this.db.select().from(orgClocks).where(eq(orgClocks.orgId, orgId))
    this.moveTo(orgId, row?.offsetMs ?? 0)
  }

  /**
   * A clock only moves forward, so an offset read from the database never lowers the one held: a
   * read can answer after a later advance was taken (this instance hears its own NOTIFY too, and
   * two advances' answers can cross), and taking its older value would move the clock back.
   */
  private moveTo(orgId: string, offsetMs: number): void {
    if (offsetMs > (this.offsets.get(orgId) ?? 0)) this.offsets.set(orgId, offsetMs)
  }

  wallNowMs(): number {
    return this.wallClockMs()
  }

  nowMs(orgId: string): number {
    return this.wallClockMs() + (this.offsets.get(orgId) ?? 0)
  }

  /** The wall-clock instant at which an organization's clock shows `orgMs` (for timers). */
  wallMsAt(orgId: string, orgMs: number): number {
    return orgMs - (this.offsets.get(orgId) ?? 0)
  }

  /** The latest time any organization's clock shows: sweeps fetch what is due by it, then judge each row on its own clock. */
  latestNowMs(): number {
    let offset = 0
    for (const value of this.offsets.values()) offset = Math.max(offset, value)
    return this.wallClockMs() + offset
  }

  now(orgId: string): Date {
    return new Date(this.nowMs(orgId))
  }

  /**
   * Runs `listener` after every `advance`, before `advance` resolves, so the answer to
   * `POST /v1/sandbox/clock/advance` already reflects what became due. Periodic sweeps still run
   * for time that passes on its own; listeners must be safe to run alongside them.
   */
  onAdvance(listener: AdvanceListener): void {
    this.advanceListeners.push(listener)
  }

  async advance(orgId: string, seconds: number): Promise<Date> {
    const [row] = await this.db
      .insert(orgClocks)
      .values({ orgId, offsetMs: seconds * 1000 })
      .onConflictDoUpdate({
        target: orgClocks.orgId,
        set: { offsetMs: sql`${orgClocks.offsetMs} + ${seconds * 1000}`, updatedAt: sql`now()` },
      })
      .returning()
    this.moveTo(orgId, row!.offsetMs)
    const now = this.now(orgId)
    const outcomes = await Promise.allSettled(this.advanceListeners.map((listener) => listener(orgId, now)))
    // The clock has moved either way; a failed listener's work is picked up by its periodic sweep.
    for (const outcome of outcomes) if (outcome.status === 'rejected') console.error('clock: work after an advance failed; its sweep retries', outcome.reason)
    return now
  }
}
