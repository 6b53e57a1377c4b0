import { payments } from '../../../db/schema/index.ts'
import { sql } from 'drizzle-orm'
import { defineWriteSet, type JournalSource } from '../../ledger/write-sets.ts'

export type PaymentRow = typeof payments.$inferInsert

declare module '../../ledger/write-sets.ts' {
  interface WriteSetRows {
    /** Payments created (their row records the reservation's movement) or moved to a new state. */
    payments: PaymentRow
  }
}

/**
 * An authorization's reservation is recorded by its payment's row (`recordedByRow` on the
 * operation), not by a movement row: the row holds the account, asset, amount and time, and its
 * `hold_id` is set only on a payment whose reservation committed in the same statement. Its two
 * legs move the amount from the account's available to its held. Payments authorized before
 * reservations were recorded this way have a `payment_authorization` movement row of their own;
 * those are not read a second time.
 */
const RECORDS_ITS_RESERVATION = sql`p.hold_id is not null
  and not exists (select 1 from ledger_movements m where m.reference = p.id and m.kind = 'payment_authorization')`

const RESERVATIONS: JournalSource = {
  legs: sql`select p.org_id, p.account_id, reserved.bucket, p.asset, reserved.sign * p.amount
    from payments p cross join (values ('available', -1), ('held', 1)) as reserved(bucket, sign)
    where ${RECORDS_ITS_RESERVATION}`,
  movements: sql`select count(*) from payments p where ${RECORDS_ITS_RESERVATION}`,
  legsPerMovement: 2,
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
  defineWriteSet({ name: 'authorizations', field: 'payments', table: payments, order: 30, operations: 'recordingMovement', journal: RESERVATIONS }),
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
