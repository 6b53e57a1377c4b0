import { and, asc, eq, gt, inArray, lte, min, ne, type SQL } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { allowlistEntries } from '../../../db/schema/index.ts'

export type AllowlistEntryRecord = typeof allowlistEntries.$inferSelect

export async function findEntry(executor: Executor, orgId: string, id: string): Promise<AllowlistEntryRecord | undefined> {
  const [row] = await executor.select().from(allowlistEntries).where(and(eq(allowlistEntries.orgId, orgId), eq(allowlistEntries.id, id)))
  return row
}

export async function findLiveEntry(executor: Executor, orgId: string, accountId: string, network: string, address: string): Promise<AllowlistEntryRecord | undefined> {
  const [row] = await executor
    .select()
    .from(allowlistEntries)
    .where(
      and(
        eq(allowlistEntries.orgId, orgId),
        eq(allowlistEntries.accountId, accountId),
        eq(allowlistEntries.network, network as AllowlistEntryRecord['network']),
        eq(allowlistEntries.address, address),
        ne(allowlistEntries.state, 'removed'),
      ),
    )
  return row
}

/** Inserts unless a live entry for the same destination exists (then answers nothing). */
export async function insertEntry(executor: Executor, row: typeof allowlistEntries.$inferInsert): Promise<AllowlistEntryRecord | undefined> {
  const [inserted] = await executor.insert(allowlistEntries).values(row).onConflictDoNothing().returning()
  return inserted
}

export async function listEntries(executor: Executor, orgId: string, accountId: string, filter: { after?: string; limit: number }): Promise<AllowlistEntryRecord[]> {
  const conditions: SQL[] = [eq(allowlistEntries.orgId, orgId), eq(allowlistEntries.accountId, accountId)]
  if (filter.after !== undefined) conditions.push(gt(allowlistEntries.id, filter.after))
  return executor.select().from(allowlistEntries).where(and(...conditions)).orderBy(asc(allowlistEntries.id)).limit(filter.limit)
}

export async function markRemoved(executor: Executor, orgId: string, id: string, now: Date): Promise<AllowlistEntryRecord | undefined> {
  const [row] = await executor
    .update(allowlistEntries)
    .set({ state: 'removed', removedAt: now })
    .where(and(eq(allowlistEntries.orgId, orgId), eq(allowlistEntries.id, id), ne(allowlistEntries.state, 'removed')))
    .returning()
  return row
}

/** Per organization with entries in their timelock, when the first of them ends (on its own clock). */
export async function pendingActivations(executor: Executor): Promise<Array<{ orgId: string; dueAt: Date | null }>> {
  return executor
    .select({ orgId: allowlistEntries.orgId, dueAt: min(allowlistEntries.activatesAt) })
    .from(allowlistEntries)
    .where(eq(allowlistEntries.state, 'registered'))
    .groupBy(allowlistEntries.orgId)
}

/**
 * Activates an organization's entries whose timelock has elapsed by `now`, in one conditional
 * statement: of two sweeps (two instances) racing, each entry is activated by exactly one.
 */
export async function activateDue(executor: Executor, orgId: string, now: Date, limit: number): Promise<AllowlistEntryRecord[]> {
  const due = executor
    .select({ id: allowlistEntries.id })
    .from(allowlistEntries)
    .where(and(eq(allowlistEntries.orgId, orgId), eq(allowlistEntries.state, 'registered'), lte(allowlistEntries.activatesAt, now)))
    .limit(limit)
  const ids = (await due).map((row) => row.id)
  if (ids.length === 0) return []
  return executor
    .update(allowlistEntries)
    .set({ state: 'active', activatedAt: now })
    .where(and(inArray(allowlistEntries.id, ids), eq(allowlistEntries.state, 'registered')))
    .returning()
}
