import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { Clock } from '../clock/clock.ts'
import type { TransferExecutor } from '../transfers/service.ts'
import { HoldExpiry, type HoldExpiryExtension } from './expiry.ts'
import { holdsRoutes } from './routes.ts'
import { HoldRecords, type OwnedHoldLookup } from './state.ts'

export interface HoldsModuleDeps {
  ledger: Ledger
  clock: Clock
  access: AccessPlugin
  /** The holds' records, shared with transfers, which pay from pending holds (`createHoldRecords`). */
  records: HoldRecords
  /** A hold's capture is a transfer paid from it. */
  transfers: TransferExecutor
}

/** Makes the records of holds that transfers and this module share; made first, since transfers need them. */
export function createHoldRecords(deps: { db: Database; ledger: Ledger; clock: Clock }): HoldRecords {
  return new HoldRecords(deps)
}

/**
 * Holds: their routes, and the expiry sweep that releases them on their organization's clock.
 * A module that owns holds (payments) registers with `registerOwner` before `start`: how to read
 * one of its holds, and what its rows add to a hold's expiry.
 */
export function createHoldsModule(deps: HoldsModuleDeps) {
  const expiry = new HoldExpiry({ ledger: deps.ledger, clock: deps.clock })
  return {
    routes: holdsRoutes({ ledger: deps.ledger, clock: deps.clock, records: deps.records, transfers: deps.transfers }, deps.access),
    records: deps.records,
    /** The sweep; `expiry.runOnce()` is one pass, which tests drive. */
    expiry,
    registerOwner(owner: { lookup: OwnedHoldLookup; onExpiry: HoldExpiryExtension }): void {
      deps.records.registerOwner(owner.lookup)
      expiry.extend(owner.onExpiry)
    },
    start(): void {
      expiry.start()
    },
    stop(): Promise<void> {
      return expiry.stop()
    },
  }
}

export type HoldsModule = ReturnType<typeof createHoldsModule>
