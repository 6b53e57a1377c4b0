import { and, eq, gt } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { quotes } from '../../../db/schema/index.ts'

export type QuoteRecord = typeof quotes.$inferSelect

export async function insertQuote(executor: Executor, row: typeof quotes.$inferInsert): Promise<QuoteRecord> {
  const [inserted] = await executor.insert(quotes).values(row).returning()
  return inserted!
}

export async function findQuote(executor: Executor, orgId: string, id: string): Promise<QuoteRecord | undefined> {
  const [row] = await executor.select().from(quotes).where(and(eq(quotes.orgId, orgId), eq(quotes.id, id)))
  return row
}

/** Marks an open, unexpired quote consumed in one statement: of two racing executions only one wins. */
export async function markQuoteConsumed(executor: Executor, orgId: string, id: string, now: Date): Promise<QuoteRecord | undefined> {
  const [row] = await executor
    .update(quotes)
    .set({ state: 'consumed', consumedAt: now })
    .where(and(eq(quotes.orgId, orgId), eq(quotes.id, id), eq(quotes.state, 'open'), gt(quotes.expiresAt, now)))
    .returning()
  return row
}
