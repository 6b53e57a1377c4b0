import { and, asc, eq, inArray, sql } from 'drizzle-orm'
import type { Executor, Transaction } from '../../../db/client.ts'
import { savePolicies, savePolicyRuns } from '../../../db/schema/index.ts'
import { EVERY_ORGANIZATION, type OwnedOrganizations } from '../../platform/ownership.ts'

export type SavePolicyRecord = typeof savePolicies.$inferSelect
export type SavePolicyRunRecord = typeof savePolicyRuns.$inferSelect

export async function upsertPolicy(executor: Executor, row: SavePolicyRecord): Promise<SavePolicyRecord> {
  const [saved] = await executor
    .insert(savePolicies)
    .values(row)
    .onConflictDoUpdate({ target: [savePolicies.orgId, savePolicies.accountId], set: { vaultId: row.vaultId, buffer: row.buffer, enabled: row.enabled, updatedAt: row.updatedAt } })
    .returning()
  return saved!
}

export async function findPolicy(executor: Executor, orgId: string, accountId: string): Promise<SavePolicyRecord | undefined> {
  const [row] = await executor.select().from(savePolicies).where(and(eq(savePolicies.orgId, orgId), eq(savePolicies.accountId, accountId)))
  return row
}

/** Enabled policies after a position (organization, account), in that order: the worker walks them a page at a time. */
export async function enabledPolicies(
  executor: Executor,
  after: { orgId: string; accountId: string } | undefined,
  limit: number,
  owned: OwnedOrganizations = EVERY_ORGANIZATION,
): Promise<SavePolicyRecord[]> {
  const where = and(
    eq(savePolicies.enabled, true),
    after === undefined ? undefined : sql`(${savePolicies.orgId}, ${savePolicies.accountId}) > (${after.orgId}, ${after.accountId})`,
    owned(savePolicies.orgId),
  )
  return executor.select().from(savePolicies).where(where).orderBy(asc(savePolicies.orgId), asc(savePolicies.accountId)).limit(limit)
}

/** Which of an organization's accounts already ran on `day`. */
export async function accountsRunOn(executor: Executor, orgId: string, accountIds: string[], day: string): Promise<Set<string>> {
  if (accountIds.length === 0) return new Set()
  const rows = await executor
    .select({ accountId: savePolicyRuns.accountId })
    .from(savePolicyRuns)
    .where(and(eq(savePolicyRuns.orgId, orgId), eq(savePolicyRuns.day, day), inArray(savePolicyRuns.accountId, accountIds)))
  return new Set(rows.map((row) => row.accountId))
}

/** Records a day's run; false when that account's day already has one (another pass or instance ran it). */
export async function insertRun(tx: Transaction, row: SavePolicyRunRecord): Promise<boolean> {
  const rows = await tx.insert(savePolicyRuns).values(row).onConflictDoNothing().returning({ day: savePolicyRuns.day })
  return rows.length === 1
}

export async function listRuns(executor: Executor, orgId: string, accountId: string, limit: number): Promise<SavePolicyRunRecord[]> {
  return executor
    .select()
    .from(savePolicyRuns)
    .where(and(eq(savePolicyRuns.orgId, orgId), eq(savePolicyRuns.accountId, accountId)))
    .orderBy(sql`${savePolicyRuns.day} desc`)
    .limit(limit)
}

