import { and, eq, inArray } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { holds } from '../../../db/schema/index.ts'
import type { PendingHoldFields } from '../../ledger/pending-hold.ts'
import { defineWriteSet } from '../../ledger/write-sets.ts'

export type HoldRow = typeof holds.$inferInsert

declare module '../../ledger/write-sets.ts' {
  interface WriteSetRows {
    /** Holds opened, or moved to their final state, in the commit that moves their money. */
    holds: HoldRow
  }
}

/**
 * A hold is opened and closed by different operations, possibly in one batch: the last state queued
 * for its id is the one written. Holds come first among the modules' rows (payments and transfers
 * name them).
 */
export const holdWriteSets = [
  defineWriteSet({
    name: 'holds',
    field: 'holds',
    table: holds,
    order: 10,
    lastStatePerId: true,
    upsert: { target: 'id', columns: ['state', 'captured_amount', 'transfer_id', 'closed_at'] },
  }),
]

/** The pending holds the ledger holds in memory from its start (`LedgerOptions.pendingHolds`). */
export async function pendingHoldsToLoad(db: Database, orgIds?: readonly string[]): Promise<PendingHoldFields[]> {
  const pending = eq(holds.state, 'pending')
  const rows = await db
    .select()
    .from(holds)
    .where(orgIds === undefined ? pending : and(pending, inArray(holds.orgId, [...orgIds])))
  return rows.map((row) => ({
    id: row.id,
    orgId: row.orgId,
    accountId: row.accountId,
    asset: row.asset,
    amountMinor: row.amount,
    expiresAtMs: row.expiresAt.getTime(),
    createdAtMs: row.createdAt.getTime(),
  }))
}
