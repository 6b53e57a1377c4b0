import { holds } from '../../../db/schema/index.ts'
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
