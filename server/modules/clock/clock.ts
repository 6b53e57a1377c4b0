import { eq, sql } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { orgClocks } from '../../../db/schema/index.ts'

/**
 * Every time-based rule reads this clock. In sandbox an organization's clock can be moved ahead
 * (Stripe's test clocks); the offset is kept in the database and cached here, and other instances
 * hear of a change by NOTIFY.
 */
export class Clock {
  private readonly offsets = new Map<string, number>()

  constructor(
    private readonly db: Database,
    private readonly wallClockMs: () => number = Date.now,
  ) {}

  async load(): Promise<void> {
    const rows = await this.db.select().from(orgClocks)
    for (const row of rows) this.offsets.set(row.orgId, row.offsetMs)
  }

  async refresh(orgId: string): Promise<void> {
    const [row] = await this.db.select().from(orgClocks).where(eq(orgClocks.orgId, orgId))
    this.offsets.set(orgId, row?.offsetMs ?? 0)
  }

  wallNowMs(): number {
    return this.wallClockMs()
  }

  nowMs(orgId: string): number {
    return this.wallClockMs() + (this.offsets.get(orgId) ?? 0)
  }

  now(orgId: string): Date {
    return new Date(this.nowMs(orgId))
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
    this.offsets.set(orgId, row!.offsetMs)
    return this.now(orgId)
  }
}
