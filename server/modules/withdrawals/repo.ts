import { EVERY_ORGANIZATION, type OwnedOrganizations } from '../../platform/ownership.ts'
import { and, asc, eq, gt, inArray, type SQL } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { apiKeys, withdrawals } from '../../../db/schema/index.ts'
import type { WithdrawalState } from './model.ts'

export type WithdrawalRecord = typeof withdrawals.$inferSelect
export type WithdrawalRow = typeof withdrawals.$inferInsert

export async function findWithdrawal(executor: Executor, orgId: string, id: string): Promise<WithdrawalRecord | undefined> {
  const [row] = await executor.select().from(withdrawals).where(and(eq(withdrawals.orgId, orgId), eq(withdrawals.id, id)))
  return row
}

export async function listWithdrawals(
  executor: Executor,
  orgId: string,
  filter: { accountId?: string; state?: WithdrawalState; after?: string; limit: number },
): Promise<WithdrawalRecord[]> {
  const conditions: SQL[] = [eq(withdrawals.orgId, orgId)]
  if (filter.accountId !== undefined) conditions.push(eq(withdrawals.accountId, filter.accountId))
  if (filter.state !== undefined) conditions.push(eq(withdrawals.state, filter.state))
  if (filter.after !== undefined) conditions.push(gt(withdrawals.id, filter.after))
  return executor.select().from(withdrawals).where(and(...conditions)).orderBy(asc(withdrawals.id)).limit(filter.limit)
}

/** Approved withdrawals not yet broadcast (after a restart, or a failed broadcast), oldest first. */
export async function approvedWithdrawals(executor: Executor, limit: number, owned: OwnedOrganizations = EVERY_ORGANIZATION): Promise<WithdrawalRecord[]> {
  return executor.select().from(withdrawals).where(and(eq(withdrawals.state, 'approved'), owned(withdrawals.orgId))).orderBy(asc(withdrawals.id)).limit(limit)
}

export async function insertWithdrawal(executor: Executor, row: WithdrawalRow): Promise<void> {
  await executor.insert(withdrawals).values(row)
}

/**
 * Moves a withdrawal from one of `from` to a new state in one conditional statement: of two racing
 * transitions (two requests, two instances, a redelivered chain outcome) exactly one wins.
 */
export async function transition(
  executor: Executor,
  id: string,
  from: readonly WithdrawalState[],
  changes: Partial<WithdrawalRow>,
): Promise<WithdrawalRecord | undefined> {
  const [row] = await executor
    .update(withdrawals)
    .set(changes)
    .where(and(eq(withdrawals.id, id), inArray(withdrawals.state, [...from])))
    .returning()
  return row
}

/** The organization's keys with their rotation links, to tell one key holder from another. */
export async function keyLinks(executor: Executor, orgId: string): Promise<Array<{ id: string; replacedByKeyId: string | null }>> {
  return executor.select({ id: apiKeys.id, replacedByKeyId: apiKeys.replacedByKeyId }).from(apiKeys).where(eq(apiKeys.orgId, orgId))
}
