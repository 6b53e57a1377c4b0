import { type OwnedOrganizations } from '../../platform/ownership.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { AddressDeriver } from '../chain/derivation.ts'
import type { Clock } from '../clock/clock.ts'

/**
 * What the deposits services work with: the database, the ledger that moves the money, the
 * organizations' clocks, the deriver of deposit addresses, and two pieces of this process's state
 * made by `createDepositsModule`: the queue that runs changes one at a time and the sweep's wake.
 */
export interface DepositsContext {
  db: Database
  ledger: Ledger
  clock: Clock
  addresses: Pick<AddressDeriver, 'depositAddress'>
  /**
   * Every change to arrivals and deposits (observe, finalize, assign, return, expire) runs one at a
   * time in this process. Each decides against the database and writes through the ledger before
   * the next starts, so an arrival is never recorded twice, a declared deposit never matches two
   * arrivals, and a suspense arrival is never both assigned and returned. The unique key on
   * (network, txHash, address) still refuses a second row if another instance raced this one.
   */
  serialized<T>(work: () => Promise<T>): Promise<T>
  /** Tells the finality and expiry sweep of work due at a wall-clock time (a no-op before it starts). */
  wakeSweep(wallMs: number): void
  /** The organizations whose arrivals this server finalizes and whose deposits it expires (in cluster mode, those it owns). */
  ownedOrganizations: OwnedOrganizations
}

/** One sweep finalizes or expires at most this many rows; the next sweep takes the rest. */
export const SWEEP_BATCH_MAX = 500

/** A queue that runs each piece of work after the one before it has finished, failed or not. */
export function createSerializer(): DepositsContext['serialized'] {
  let tail: Promise<unknown> = Promise.resolve()
  return <T>(work: () => Promise<T>): Promise<T> => {
    const run = tail.then(work)
    tail = run.catch(() => {})
    return run
  }
}

/** Tells the sweep of work this process just created, due at `at` on the organization's clock. */
export function wakeSweepFor(context: DepositsContext, orgId: string, at: Date): void {
  context.wakeSweep(context.clock.wallMsAt(orgId, at.getTime()))
}
