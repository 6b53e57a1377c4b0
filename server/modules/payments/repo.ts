import { and, asc, eq, gt, type SQL } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { events, payments } from '../../../db/schema/index.ts'
import type { EventRow, PaymentRow } from '../../ledger/writer.ts'
import { insertRecords, type IdempotencyRow } from '../../platform/idempotency.ts'

export type PaymentRecord = typeof payments.$inferSelect

export async function findPayment(executor: Executor, orgId: string, id: string): Promise<PaymentRecord | undefined> {
  const [row] = await executor.select().from(payments).where(and(eq(payments.orgId, orgId), eq(payments.id, id)))
  return row
}

export async function listPayments(executor: Executor, orgId: string, filter: { accountId?: string; after?: string; limit: number }): Promise<PaymentRecord[]> {
  const conditions: SQL[] = [eq(payments.orgId, orgId)]
  if (filter.accountId !== undefined) conditions.push(eq(payments.accountId, filter.accountId))
  if (filter.after !== undefined) conditions.push(gt(payments.id, filter.after))
  return executor.select().from(payments).where(and(...conditions)).orderBy(asc(payments.id)).limit(filter.limit)
}

export async function authorizedPayments(executor: Executor): Promise<PaymentRecord[]> {
  return executor.select().from(payments).where(eq(payments.state, 'authorized'))
}

/** A decline moves no money, so it skips the ledger: its row and event commit together here. */
/**
 * The decline, its event and (with an Idempotency-Key) its saved answer, in one transaction. A key
 * held by a live record means an earlier request owns it: nothing is written and `key_taken` is
 * answered.
 */
export async function insertDecline(executor: Executor, row: PaymentRow, event: EventRow, record?: IdempotencyRow): Promise<'recorded' | 'key_taken'> {
  return executor.transaction(async (tx) => {
    if (record) {
      const written = await insertRecords(tx, [record])
      if (written.size === 0) return 'key_taken'
    }
    await tx
      .insert(payments)
      .values(row)
      .onConflictDoUpdate({ target: payments.id, set: { state: row.state, failureCode: row.failureCode ?? null, closedAt: row.closedAt ?? null } })
    await tx.insert(events).values(event)
    return 'recorded'
  })
}
