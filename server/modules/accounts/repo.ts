import { and, asc, eq, gt, isNull, type SQL } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { accounts, attestationKeys } from '../../../db/schema/index.ts'

export type AccountRow = typeof accounts.$inferSelect
export type AttestationKeyRow = typeof attestationKeys.$inferSelect

/** Inserts unless the organization already has this externalId; answers the new row or nothing. */
export async function insertAccountIfAbsent(executor: Executor, row: typeof accounts.$inferInsert): Promise<AccountRow | undefined> {
  const [inserted] = await executor.insert(accounts).values(row).onConflictDoNothing().returning()
  return inserted
}

export async function findAccount(executor: Executor, orgId: string, accountId: string): Promise<AccountRow | undefined> {
  const [row] = await executor.select().from(accounts).where(and(eq(accounts.orgId, orgId), eq(accounts.id, accountId)))
  return row
}

export async function findAccountByExternalId(executor: Executor, orgId: string, externalId: string): Promise<AccountRow | undefined> {
  const [row] = await executor
    .select()
    .from(accounts)
    .where(and(eq(accounts.orgId, orgId), eq(accounts.externalId, externalId)))
  return row
}

export async function listAccounts(
  executor: Executor,
  orgId: string,
  filter: { externalId?: string; after?: string; limit: number },
): Promise<AccountRow[]> {
  const conditions: SQL[] = [eq(accounts.orgId, orgId)]
  if (filter.externalId !== undefined) conditions.push(eq(accounts.externalId, filter.externalId))
  if (filter.after !== undefined) conditions.push(gt(accounts.id, filter.after))
  return executor
    .select()
    .from(accounts)
    .where(and(...conditions))
    .orderBy(asc(accounts.id))
    .limit(filter.limit)
}

export async function updateAccount(
  executor: Executor,
  orgId: string,
  accountId: string,
  changes: Partial<typeof accounts.$inferInsert>,
): Promise<AccountRow | undefined> {
  const [row] = await executor
    .update(accounts)
    .set(changes)
    .where(and(eq(accounts.orgId, orgId), eq(accounts.id, accountId)))
    .returning()
  return row
}

export async function insertAttestationKey(executor: Executor, row: typeof attestationKeys.$inferInsert): Promise<AttestationKeyRow> {
  const [inserted] = await executor.insert(attestationKeys).values(row).returning()
  return inserted!
}

export async function listAttestationKeys(executor: Executor, orgId: string, activeOnly: boolean): Promise<AttestationKeyRow[]> {
  const conditions: SQL[] = [eq(attestationKeys.orgId, orgId)]
  if (activeOnly) conditions.push(isNull(attestationKeys.revokedAt))
  return executor
    .select()
    .from(attestationKeys)
    .where(and(...conditions))
    .orderBy(asc(attestationKeys.id))
}

export async function revokeAttestationKey(executor: Executor, orgId: string, keyId: string, at: Date): Promise<AttestationKeyRow | undefined> {
  const [row] = await executor
    .update(attestationKeys)
    .set({ revokedAt: at })
    .where(and(eq(attestationKeys.orgId, orgId), eq(attestationKeys.id, keyId)))
    .returning()
  return row
}
