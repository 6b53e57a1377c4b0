import { chainArrivals, deposits } from '../../../db/schema/index.ts'
import { defineWriteSet } from '../../ledger/write-sets.ts'

export type DepositRow = typeof deposits.$inferInsert
export type ChainArrivalRow = typeof chainArrivals.$inferInsert

declare module '../../ledger/write-sets.ts' {
  interface WriteSetRows {
    /** Deposits and the chain arrivals that fund them, written (or moved to a new state) in the commit that moves their money. */
    deposits: DepositRow
    chainArrivals: ChainArrivalRow
  }
}

/**
 * Both move through states, possibly twice in one batch: the last state queued for an id wins. A
 * new arrival conflicts on its id only when it is being moved on; the (network, txHash, address)
 * key refuses a second row for the same observation, failing the commit loudly.
 */
export const depositWriteSets = [
  defineWriteSet({
    name: 'arrivals',
    field: 'chainArrivals',
    table: chainArrivals,
    order: 50,
    lastStatePerId: true,
    upsert: { target: 'id', columns: ['state', 'disposition', 'account_id', 'deposit_id', 'finalized_at', 'resolved_at', 'resolution_note'] },
  }),
  defineWriteSet({
    name: 'deposits',
    field: 'deposits',
    table: deposits,
    order: 60,
    lastStatePerId: true,
    upsert: { target: 'id', columns: ['state', 'received_amount', 'amount_match', 'arrival_id', 'tx_hash', 'arrived_at', 'completed_at'] },
  }),
]
