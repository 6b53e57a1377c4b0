import { inArray } from 'drizzle-orm'
import type { Database } from '../../db/client.ts'
import { ledgerBalances } from '../../db/schema/index.ts'
import { balanceKey, type BalanceDelta, type HotBalance, type HotBalances } from './hot-balances.ts'

/**
 * Memory against Postgres: after each commit (the commit point) and after a failure (read-back).
 * Postgres is the truth; memory must equal its rows plus what is still on its way (`pending`: the
 * deltas of batches in flight behind and of operations queued), and takes its values when not.
 */
export class BalanceReconciler {
  /** Commit-point checks that found memory and Postgres apart (a bug); memory took Postgres' values. */
  invariantBreaches = 0

  constructor(
    private readonly db: Database,
    private readonly balances: HotBalances,
  ) {}

  /**
   * After a commit, Postgres must hold exactly memory minus what is still in flight behind this
   * batch or queued. A mismatch is a bug: it is reported loudly and memory takes Postgres' values
   * (the database is the truth; its checks already refused any row breaking the invariant).
   */
  checkCommitPoint(written: HotBalance[], pending: Map<string, BalanceDelta>): void {
    // total = available + held + in_flight of each row is a check constraint: Postgres refused the
    // batch before commit if it did not hold.
    for (const row of written) {
      const key = balanceKey(row.orgId, row.accountId, row.asset)
      if (this.takeDatabaseValues(key, row, pending)) continue
      this.invariantBreaches += 1
      console.error(`ledger: INVARIANT BREACH: memory of ${row.accountId} ${row.asset} differed from the database after a commit; took the database's values`)
    }
  }

  /** Reads the touched balances back from Postgres into memory (between batches: nothing in flight). */
  async readBack(touched: Map<string, BalanceDelta>, pending: () => Map<string, BalanceDelta>): Promise<void> {
    if (touched.size === 0) return
    const accountIds = [...new Set([...touched.values()].map((delta) => delta.accountId))]
    const rows: HotBalance[] = await this.db.select().from(ledgerBalances).where(inArray(ledgerBalances.accountId, accountIds))
    // What was queued while the rows were read is on its way too.
    const onItsWay = pending()
    for (const [key, delta] of touched) {
      const stored = rows.find((row) => balanceKey(row.orgId, row.accountId, row.asset) === key)
      const database: HotBalance = stored ?? { ...delta, available: 0n, held: 0n, inFlight: 0n, total: 0n }
      if (!this.takeDatabaseValues(key, database, onItsWay)) console.error(`ledger: memory of ${delta.accountId} ${delta.asset} differed from the database; took the database's values`)
    }
  }

  /**
   * Memory must equal the database's row plus what is still on its way (`pending`). Answers whether
   * it did; if not, memory takes those values.
   */
  private takeDatabaseValues(key: string, database: HotBalance, pending: Map<string, BalanceDelta>): boolean {
    const expected = withDelta(database, pending.get(key))
    const memory = this.balances.getByKey(key)
    if (memory !== undefined && memory.available === expected.available && memory.held === expected.held && memory.inFlight === expected.inFlight) return true
    this.balances.load(expected)
    return false
  }
}

/** A balance plus deltas still on their way. */
function withDelta(balance: HotBalance, delta: BalanceDelta | undefined): HotBalance {
  if (delta === undefined) return balance
  return {
    ...balance,
    available: balance.available + delta.available,
    held: balance.held + delta.held,
    inFlight: balance.inFlight + delta.inFlight,
    total: balance.total + delta.available + delta.held + delta.inFlight,
  }
}
