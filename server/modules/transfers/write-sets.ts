import { transfers } from '../../../db/schema/index.ts'
import { defineWriteSet } from '../../ledger/write-sets.ts'

export type TransferRow = typeof transfers.$inferInsert

declare module '../../ledger/write-sets.ts' {
  interface WriteSetRows {
    /** Transfers, each written once in the commit that moves its money. */
    transfers: TransferRow
  }
}

export const transferWriteSets = [defineWriteSet({ name: 'transfers', field: 'transfers', table: transfers, order: 20 })]
