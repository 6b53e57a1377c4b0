import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { AuthDependencies } from '../../platform/auth.ts'
import type { IdempotencyStore } from '../../platform/idempotency.ts'
import type { LoadShedder } from '../../platform/load-shedder.ts'
import type { LoopLag } from '../../platform/loop-lag.ts'
import type { Clock } from '../clock/clock.ts'
import type { HoldsModule } from '../holds/index.ts'
import { authorizationFront } from './front.ts'
import { lapseOnExpiry, loadOwnedHolds, paymentHold } from './lifecycle.ts'
import { paymentsOpsRoutes, paymentsRoutes } from './routes.ts'
import { configurePayments, createPaymentsCore, paymentsStats } from './state.ts'

export interface PaymentsModuleDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  access: AccessPlugin
  /** The idempotency records: an authorization writes its key's record in its own commit. */
  idempotency: IdempotencyStore
  /** Authentication and rate counting, for the authorizations answered in front of the app. */
  auth: AuthDependencies
  /** The load shedder in force, read at each authorization; undefined when shedding is off. */
  shedder: () => LoadShedder | undefined
  loopLag: LoopLag
  /** Payments own the holds of their authorizations: they register with the holds module here. */
  holds: Pick<HoldsModule, 'records' | 'registerOwner'>
  config: { bodyLimitBytes: number; slowAuthorizationMs: number; slowAuthorizationsKept: number }
}

/**
 * Card-style payments: authorize (the hot path, answered in front of the app by `front`),
 * capture, void, and the lapse of an uncaptured authorization. Registers as the owner of its
 * authorizations' holds at once, so the hold sweep expires a payment with its hold; `start` puts
 * the authorized payments' holds back in memory and must run before the hold sweep starts.
 */
export function createPaymentsModule(deps: PaymentsModuleDeps) {
  const core = createPaymentsCore({ db: deps.db, ledger: deps.ledger, clock: deps.clock, holds: deps.holds.records, shedder: deps.shedder, config: deps.config })
  deps.holds.registerOwner({ lookup: (orgId, holdId) => paymentHold(core, orgId, holdId), onExpiry: lapseOnExpiry(core) })
  return {
    routes: paymentsRoutes(core, deps.access, deps.idempotency),
    opsRoutes: paymentsOpsRoutes(core),
    /**
     * The authorization route in front of the app (`app` answers every other request): its
     * `routes` go to Bun's router, its `handle` answers a request as a listening server would.
     */
    front(app: (request: Request) => Response | Promise<Response>) {
      return authorizationFront({ core, records: deps.idempotency, auth: deps.auth, shedder: deps.shedder, loopLag: deps.loopLag, bodyLimitBytes: deps.config.bodyLimitBytes }, app)
    },
    /** Tests shorten or lengthen the budget, or lower the declines memory may keep waiting (see `configurePayments`). */
    configure(options: { budgetMs?: number; declineBacklogMax?: number }): void {
      configurePayments(core, options)
    },
    /** The decline recorder (tests hold its writes back). */
    declines: core.declines,
    stats: () => paymentsStats(core),
    async start(): Promise<void> {
      await loadOwnedHolds(core)
    },
    /**
     * Makes the pending holds of these organizations' authorized payments known to memory as owned
     * by their payments: in cluster mode, when this server becomes the owner of the organizations
     * (`Ledger.loadOrganizations` loads the rest of their state).
     */
    loadAuthorizedHolds(orgIds: readonly string[]): Promise<void> {
      return loadOwnedHolds(core, orgIds)
    },
    /** Background retries of fail-closed declines stop, and the decline records still queued are written. */
    async stop(): Promise<void> {
      core.stopped = true
      await core.declines.stop()
    },
  }
}

export type PaymentsModule = ReturnType<typeof createPaymentsModule>
