import { sql } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { vaultClock } from '../../../db/schema/index.ts'

const CLOCK_ID = 'vaults'

/**
 * The vaults' clock. Vaults are platform-wide, so their time (daily prices, cycle cadence, price
 * freshness) is not any one organization's sandbox clock: it is the wall clock plus an offset that
 * operators move ahead in sandbox (`POST /ops/v1/vaults/clock/advance`), kept in Postgres.
 */
export class VaultClock {
  private offsetMs = 0

  constructor(
    private readonly db: Database,
    private readonly wallNowMs: () => number,
  ) {}

  async load(): Promise<void> {
    const [row] = await this.db.select().from(vaultClock)
    this.offsetMs = row?.offsetMs ?? 0
  }

  now(): Date {
    return new Date(this.wallNowMs() + this.offsetMs)
  }

  async advance(seconds: number): Promise<Date> {
    const [row] = await this.db
      .insert(vaultClock)
      .values({ id: CLOCK_ID, offsetMs: seconds * 1000 })
      .onConflictDoUpdate({ target: vaultClock.id, set: { offsetMs: sql`${vaultClock.offsetMs} + ${seconds * 1000}` } })
      .returning()
    this.offsetMs = Math.max(this.offsetMs, row!.offsetMs)
    return this.now()
  }
}
