import { sql, type SQL } from 'drizzle-orm'
import { assert } from '../lib/assert.ts'
import type { LedgerOperation } from './writer.ts'
import type { JournalSource } from './write-sets.ts'

/**
 * The ledger's journal: every movement and its legs. Most movements are rows of
 * `ledger_movements`; some are recorded by a module's own rows instead (an authorization's
 * reservation by its payment's row, which already holds the account, asset, amount and time): those
 * modules declare them on their write sets (`WriteSet.journal`), and the journal reads them beside
 * the movement rows. Verification proves the ledger against this whole journal.
 */

/**
 * Every leg of the journal as rows of (org_id, account_id, bucket, asset, amount): the stored
 * movements' legs, then those of the movements recorded by `sources`. A subquery for reads that
 * prove the ledger, not for any request's path.
 */
export function journalLegs(sources: readonly JournalSource[]): SQL {
  const stored = sql`select m.org_id, leg.account_id, leg.bucket, leg.asset, leg.amount
    from ledger_movements m, unnest(m.accounts, m.buckets, m.assets, m.amounts) as leg(account_id, bucket, asset, amount)`
  return sql`(${sql.join([stored, ...sources.map((source) => source.legs)], sql` union all `)})`
}

/** How many movements the journal holds and how many legs they have: stored ones and those `sources` record. */
export function journalCounts(sources: readonly JournalSource[]): SQL {
  const movements = sources.map((source) => sql` + (${source.movements})`)
  const legs = sources.map((source) => sql` + ${source.legsPerMovement} * (${source.movements})`)
  return sql`select
    (select count(*) from ledger_movements)${sql.join(movements, sql``)} as movements,
    (select coalesce(sum(cardinality(amounts)), 0) from ledger_movements)${sql.join(legs, sql``)} as postings`
}

/** What the row recording a reservation holds (the rows of write sets taking `recordingMovement` operations). */
export interface ReservationRecord {
  orgId: string
  accountId: string
  asset: string
  amount: bigint
  holdId: string | null
}

/**
 * An operation whose movement a row of its own records must carry exactly what that row implies:
 * one row holding a hold, and two legs moving its amount from the account's available to its
 * held. Anything else would make the derived journal differ from what memory and the balances did.
 */
export function assertReservationRecord(op: LedgerOperation, records: ReadonlyArray<Partial<ReservationRecord>>): void {
  const record = records.length === 1 ? records[0] : undefined
  assert(record !== undefined && typeof record.holdId === 'string' && typeof record.amount === 'bigint', 'a reservation recorded by a row has one row with a hold and an amount')
  const [from, to] = op.postings
  assert(
    op.postings.length === 2 &&
      from!.bucket === 'available' &&
      to!.bucket === 'held' &&
      from!.accountId === record.accountId &&
      to!.accountId === record.accountId &&
      from!.asset === record.asset &&
      to!.asset === record.asset &&
      from!.amountMinor === -record.amount &&
      to!.amountMinor === record.amount &&
      record.orgId === op.orgId,
    "a reservation recorded by a row moves the row's amount from its account's available to its held",
  )
}
