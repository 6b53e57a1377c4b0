import { EVERY_ORGANIZATION, type OwnedOrganizations } from '../../platform/ownership.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { DueSweep, earliestWallMs, whenDue } from '../../platform/due-sweep.ts'
import type { IdempotencyStore } from '../../platform/idempotency.ts'
import type { AddressDeriver } from '../chain/derivation.ts'
import type { Clock } from '../clock/clock.ts'
import { finalizeDueArrivals, getArrival, observeArrival } from './arrivals.ts'
import { createSerializer, type DepositsContext } from './context.ts'
import { expireDueDeposits } from './declared.ts'
import type { ArrivalInput } from './model.ts'
import * as repo from './repo.ts'
import { depositsRoutes, suspenseOpsRoutes } from './routes.ts'
import { assignSuspense, returnSuspense } from './suspense.ts'

/**
 * The sweep for arrivals that reached finality and declared deposits that expired runs when the
 * earliest of them falls due (see `DueSweep`), and at least this often for what another instance
 * wrote or a wall clock that jumped.
 */
const SWEEP_BACKSTOP_MS = 2000
/** The least time between passes while work stays due (the interval the sweep used to poll at). */
const SWEEP_MIN_GAP_MS = 250

export interface DepositsModuleDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  /** Derives each account's deposit addresses from DEPOSIT_KEY_SEED. */
  addresses: Pick<AddressDeriver, 'depositAddress'>
  access: AccessPlugin
  /** The operators' suspense actions commit their Idempotency-Key with the movement. */
  idempotency: IdempotencyStore
  /** In cluster mode, the organizations this server owns: its sweep finalizes and expires theirs only. */
  ownedOrganizations?: OwnedOrganizations
}

/**
 * Deposits: addresses, declared deposits, chain arrivals and suspense, with the sweep that
 * finalizes arrivals and expires declared deposits as they fall due (and for an organization right
 * after its sandbox clock moved). `start` registers the clock listener and starts the sweep; `stop`
 * ends the sweep and writes what the ledger still holds.
 */
export function createDepositsModule(deps: DepositsModuleDeps) {
  const wallNowMs = () => deps.clock.wallNowMs()
  const nextDue = async () => earliestWallMs(deps.clock, await repo.nextDueWork(deps.db))
  const context: DepositsContext = {
    db: deps.db,
    ledger: deps.ledger,
    clock: deps.clock,
    addresses: deps.addresses,
    serialized: createSerializer(),
    ownedOrganizations: deps.ownedOrganizations ?? EVERY_ORGANIZATION,
    wakeSweep: (wallMs) => sweep.wake(wallMs),
  }
  /** Finality and expiry, for all organizations or for one right after its clock moved. */
  const runDueWork = async (orgId?: string): Promise<void> => {
    await finalizeDueArrivals(context, orgId)
    await expireDueDeposits(context, orgId)
  }
  const sweep = new DueSweep({ name: 'deposits', backstopMs: SWEEP_BACKSTOP_MS, minGapMs: SWEEP_MIN_GAP_MS, wallNowMs }, () => whenDue(wallNowMs, nextDue, () => runDueWork()))

  return {
    routes: depositsRoutes(context, deps.access),
    opsRoutes: suspenseOpsRoutes(context, deps.idempotency),
    /** Arrivals as a chain watcher (the sandbox simulator's routes) reports and reads them. */
    arrivals: {
      observe: (orgId: string, input: ArrivalInput) => observeArrival(context, orgId, input),
      get: (orgId: string | undefined, id: string) => getArrival(context, orgId, id),
    },
    /** The sweep's steps and the operators' suspense actions, as tests drive them. */
    finalizeDueArrivals: (orgId?: string) => finalizeDueArrivals(context, orgId),
    expireDueDeposits: (orgId?: string) => expireDueDeposits(context, orgId),
    assignSuspense: (arrivalId: string, input: { accountId: string; note?: string }) => assignSuspense(context, arrivalId, input),
    returnSuspense: (arrivalId: string, input: { note?: string }) => returnSuspense(context, arrivalId, input),
    runDueWork,
    start(): void {
      deps.clock.onAdvance(async (orgId) => {
        await runDueWork(orgId)
        // The organization's later work now falls due earlier.
        sweep.wake()
      })
      sweep.start()
    },
    async stop(): Promise<void> {
      await sweep.stop()
      await deps.ledger.drain()
    },
  }
}

export type DepositsModule = ReturnType<typeof createDepositsModule>
