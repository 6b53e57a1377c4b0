import { and, asc, eq, gt, type SQL } from 'drizzle-orm'
import { queryPrepared, type Executor } from '../../../db/client.ts'
import { events, payments } from '../../../db/schema/index.ts'
import type { EventRow, PaymentRow } from '../../ledger/writer.ts'
import { bulkInsert, upsertTail } from '../../../db/bulk.ts'
import { insertRecords, recordId, type IdempotencyRow } from '../../platform/idempotency.ts'

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
interface PendingDecline {
  row: PaymentRow
  event: EventRow
  record?: IdempotencyRow
  resolve(outcome: 'recorded' | 'key_taken'): void
  reject(error: unknown): void
}

/**
 * Declines are written in batches like approvals: whatever queued while a write was in flight goes
 * in the next transaction, so a burst of declines (an overloaded or unreachable database) costs a
 * few transactions, not one each. Each decline is written with its event and, with an
 * Idempotency-Key, its saved answer; a key held by a live record means an earlier request owns it,
 * and that decline is answered `key_taken` with nothing of it written.
 */
export class DeclineRecorder {
  private queue: PendingDecline[] = []
  private flushing = false

  constructor(
    private readonly executor: Executor,
    private readonly batchMax = 500,
  ) {}

  record(row: PaymentRow, event: EventRow, record?: IdempotencyRow): Promise<'recorded' | 'key_taken'> {
    return new Promise((resolve, reject) => {
      this.queue.push({ row, event, record, resolve, reject })
      if (!this.flushing) void this.flush()
    })
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      while (this.queue.length > 0) await this.write(this.queue.splice(0, this.batchMax))
    } finally {
      this.flushing = false
    }
  }

  private async write(batch: PendingDecline[]): Promise<void> {
    try {
      const taken = await this.executor.transaction(async (tx) => {
        const claiming = batch.filter((pending) => pending.record !== undefined)
        const unique = new Map(claiming.map((pending) => [recordId(pending.record!.orgId, pending.record!.key), pending]))
        const written = unique.size > 0 ? await insertRecords(tx, [...unique.values()].map((pending) => pending.record!)) : new Set<string>()
        const lost = new Set(claiming.filter((pending) => unique.get(recordId(pending.record!.orgId, pending.record!.key)) !== pending || !written.has(recordId(pending.record!.orgId, pending.record!.key))))
        const kept = batch.filter((pending) => !lost.has(pending))
        if (kept.length > 0) {
          await queryPrepared(tx, bulkInsert(payments, kept.map((pending) => pending.row), upsertTail('id', ['state', 'failure_code', 'closed_at'])))
          await queryPrepared(tx, bulkInsert(events, kept.map((pending) => pending.event)))
        }
        return lost
      })
      for (const pending of batch) pending.resolve(taken.has(pending) ? 'key_taken' : 'recorded')
    } catch (error) {
      for (const pending of batch) pending.reject(error)
    }
  }
}
