import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../../db/client.ts'
import { journalCounts, journalLegs } from './journal.ts'
import type { JournalSource } from './write-sets.ts'

export interface VerifyProblem {
  check: 'balance_matches_postings' | 'movement_sums_to_zero' | 'total_invariant' | 'customer_nonnegative'
  detail: Record<string, string>
}

export interface VerifyReport {
  ok: boolean
  counts: { balances: number; movements: number; postings: number }
  problems: VerifyProblem[]
}

/** Verify reports at most this many problems; one is enough to page someone. */
const PROBLEMS_MAX = 100

/**
 * Proves the ledger over the whole database, from the immutable postings (the legs of every
 * movement, the reservations their payments record included: `journal.ts`) up: each balance row
 * equals the sum of its postings, per bucket; every stored movement sums to
 * zero per asset (vault shares are assets of their own, so they are proven the same way); and every
 * row keeps `total = available + held + inFlight` (allocations are share rows valued at read time,
 * added to the asset's total by the balances endpoint). Runs in one repeatable-read snapshot so
 * concurrent commits cannot skew it.
 */
export async function verifyLedger(db: Database, journal: readonly JournalSource[]): Promise<VerifyReport> {
  return db.transaction(
    async (tx) => {
      const problems: VerifyProblem[] = []
      const add = (check: VerifyProblem['check'], rows: Array<Record<string, unknown>>) => {
        for (const row of rows) {
          if (problems.length >= PROBLEMS_MAX) return
          problems.push({ check, detail: Object.fromEntries(Object.entries(row).map(([key, value]) => [key, String(value)])) })
        }
      }
      add(
        'balance_matches_postings',
        await queryRows(
          tx,
          sql`with sums as (
                select org_id, account_id, asset,
                  coalesce(sum(amount) filter (where bucket = 'available'), 0) as available,
                  coalesce(sum(amount) filter (where bucket = 'held'), 0) as held,
                  coalesce(sum(amount) filter (where bucket = 'in_flight'), 0) as in_flight
                from ${journalLegs(journal)} as leg
                group by org_id, account_id, asset)
              select coalesce(b.org_id, s.org_id) as org_id, coalesce(b.account_id, s.account_id) as account_id,
                coalesce(b.asset, s.asset) as asset,
                b.available as balance_available, s.available as postings_available,
                b.held as balance_held, s.held as postings_held,
                b.in_flight as balance_in_flight, s.in_flight as postings_in_flight
              from ledger_balances b full outer join sums s
                on s.org_id = b.org_id and s.account_id = b.account_id and s.asset = b.asset
              where coalesce(b.available, 0) <> coalesce(s.available, 0)
                 or coalesce(b.held, 0) <> coalesce(s.held, 0)
                 or coalesce(b.in_flight, 0) <> coalesce(s.in_flight, 0)
              limit ${PROBLEMS_MAX}`,
        ),
      )
      add(
        'movement_sums_to_zero',
        await queryRows(
          tx,
          sql`select m.id as movement_id, leg.asset, sum(leg.amount) as sum
              from ledger_movements m, unnest(m.assets, m.amounts) as leg(asset, amount)
              group by m.id, leg.asset having sum(leg.amount) <> 0 limit ${PROBLEMS_MAX}`,
        ),
      )
      add(
        'total_invariant',
        await queryRows(
          tx,
          sql`select org_id, account_id, asset, total, available, held, in_flight from ledger_balances
              where total <> available + held + in_flight limit ${PROBLEMS_MAX}`,
        ),
      )
      add(
        'customer_nonnegative',
        await queryRows(
          tx,
          sql`select org_id, account_id, asset, available, held, in_flight from ledger_balances
              where kind = 'customer' and (available < 0 or held < 0 or in_flight < 0) limit ${PROBLEMS_MAX}`,
        ),
      )
      const [counts] = await queryRows<{ balances: string; movements: string; postings: string }>(
        tx,
        sql`select (select count(*) from ledger_balances) as balances, journal.movements, journal.postings from (${journalCounts(journal)}) as journal`,
      )
      return {
        ok: problems.length === 0,
        counts: { balances: Number(counts?.balances ?? 0), movements: Number(counts?.movements ?? 0), postings: Number(counts?.postings ?? 0) },
        problems,
      }
    },
    { isolationLevel: 'repeatable read', accessMode: 'read only' },
  )
}
