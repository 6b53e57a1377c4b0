import { and, asc, eq, gt, or, type SQL } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { transfers } from '../../../db/schema/index.ts'

export type TransferRecord = typeof transfers.$inferSelect

export async function findTransfer(executor: Executor, orgId: string, id: string): Promise<TransferRecord | undefined> {
  const [row] = await executor.select().from(transfers).where(and(eq(transfers.orgId, orgId), eq(transfers.id, id)))
  return row
}

export async function listTransfers(executor: Executor, orgId: string, filter: { accountId?: string; after?: string; limit: number }): Promise<TransferRecord[]> {
  const conditions: SQL[] = [eq(transfers.orgId, orgId)]
  if (filter.accountId !== undefined) {
    conditions.push(or(eq(transfers.sourceAccountId, filter.accountId), eq(transfers.destinationAccountId, filter.accountId))!)
  }
  if (filter.after !== undefined) conditions.push(gt(transfers.id, filter.after))
  return executor
    .select()
    .from(transfers)
    .where(and(...conditions))
    .orderBy(asc(transfers.id))
    .limit(filter.limit)
}
