import { payments } from '../../../db/schema/index.ts'
import { defineWriteSet } from '../../ledger/write-sets.ts'

export type PaymentRow = typeof payments.$inferInsert

declare module '../../ledger/write-sets.ts' {
  interface WriteSetRows {
    /** Payments created (their row records the reservation's movement) or moved to a new state. */
    payments: PaymentRow
  }
}

/**
 * A payment that records its reservation is created by this commit (its hold is never added to a
 * row written before): a plain insert, which a second row with its key fails loudly. Only payments
 * moving to a new state are upserted, the last state queued for an id winning; an upsert costs
 * Postgres a probe of the key and a speculative insertion per row (docs/architecture.md, "Group
 * commit"). A payment created in a batch is not also moved in it: its capture, void or lapse needs
 * it committed first.
 */
export const paymentWriteSets = [
  defineWriteSet({ name: 'authorizations', field: 'payments', table: payments, order: 30, operations: 'recordingMovement' }),
  defineWriteSet({
    name: 'payments',
    field: 'payments',
    table: payments,
    order: 40,
    operations: 'ownMovement',
    lastStatePerId: true,
    disjointFrom: 'authorizations',
    upsert: { target: 'org_id, id', columns: ['state', 'failure_code', 'captured_amount', 'closed_at'] },
  }),
]
