import { sql, type SQL } from 'drizzle-orm'
import { assert } from '../lib/assert.ts'
import type { LedgerOperation } from './writer.ts'

/**
 * The ledger's journal: every movement and its legs. Most movements are rows of
 * `ledger_movements`; an authorization's reservation is recorded by its payment's row instead
 * (`recordedByPayment` on the operation), which already holds the account, asset, amount and time,
 * and whose `hold_id` is set only on a payment whose reservation committed in the same statement as
 * the row. Its two legs are the amount from the account's available to its held.
 *
 * Payments authorized before reservations were recorded this way have a `payment_authorization`
 * movement row of their own; those are not derived a second time.
 */

/** A payment `p` whose row records its reservation's movement (and not a movement row of its own as well). */
const RECORDS_ITS_RESERVATION = sql`p.hold_id is not null
  and not exists (select 1 from ledger_movements m where m.reference = p.id and m.kind = 'payment_authorization')`

/**
 * Every leg of the journal as rows of (org_id, account_id, bucket, asset, amount): the stored
 * movements' legs, then the two legs of each reservation its payment records. A subquery for reads
 * that prove the ledger, not for any request's path.
 */
export const JOURNAL_LEGS: SQL = sql`(
  select m.org_id, leg.account_id, leg.bucket, leg.asset, leg.amount
    from ledger_movements m, unnest(m.accounts, m.buckets, m.assets, m.amounts) as leg(account_id, bucket, asset, amount)
  union all
  select p.org_id, p.account_id, reserved.bucket, p.asset, reserved.sign * p.amount
    from payments p cross join (values ('available', -1), ('held', 1)) as reserved(bucket, sign)
    where ${RECORDS_ITS_RESERVATION})`

/** How many movements the journal holds and how many legs they have, stored and recorded by payments together. */
export const JOURNAL_COUNTS: SQL = sql`select
  (select count(*) from ledger_movements) + reservations.count as movements,
  (select coalesce(sum(cardinality(amounts)), 0) from ledger_movements) + 2 * reservations.count as postings
  from (select count(*) as count from payments p where ${RECORDS_ITS_RESERVATION}) as reservations`

/** What the row recording a reservation holds (the rows of write sets taking `recordingMovement` operations). */
export interface ReservationRecord {
  orgId: string
  accountId: string
  asset: string
  amount: bigint
  holdId: string | null
}

/**
 * An operation whose movement its payment row records must carry exactly what that row implies:
 * one payment holding a hold, and two legs moving its amount from the account's available to its
 * held. Anything else would make the derived journal differ from what memory and the balances did.
 */
export function assertReservationRecord(op: LedgerOperation, records: ReadonlyArray<Partial<ReservationRecord>>): void {
  const payment = records.length === 1 ? records[0] : undefined
  assert(payment !== undefined && typeof payment.holdId === 'string' && typeof payment.amount === 'bigint', 'a reservation recorded by its payment has one payment row with a hold and an amount')
  const [from, to] = op.postings
  assert(
    op.postings.length === 2 &&
      from!.bucket === 'available' &&
      to!.bucket === 'held' &&
      from!.accountId === payment.accountId &&
      to!.accountId === payment.accountId &&
      from!.asset === payment.asset &&
      to!.asset === payment.asset &&
      from!.amountMinor === -payment.amount &&
      to!.amountMinor === payment.amount &&
      payment.orgId === op.orgId,
    "a reservation recorded by its payment moves the payment's amount from its account's available to its held",
  )
}
