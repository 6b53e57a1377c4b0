import type { AccessPlugin } from '../../platform/access.ts'
import { DueSweep } from '../../platform/due-sweep.ts'
import { allowlistRoutes } from './routes.ts'
import { activateAllDue, activateDueEntries, requireActiveEntry, type AllowlistContext } from './service.ts'

/**
 * The activation sweep runs when the first timelock ends (see `DueSweep`), right after a sandbox
 * clock advance, and at least this often for entries another instance registered.
 */
const ACTIVATION_SWEEP_BACKSTOP_MS = 2000
/** The least time between passes while entries stay due (the interval the sweep used to poll at). */
const ACTIVATION_SWEEP_MIN_GAP_MS = 1000

export interface AllowlistModuleDeps extends Omit<AllowlistContext, 'wakeSweep'> {
  access: AccessPlugin
}

/**
 * The withdrawal allowlist: destinations registered in a 24 h timelock, then active. `start` runs
 * the activation sweep in the background and right after a sandbox clock advance; `stop` ends it.
 */
export function createAllowlistModule(deps: AllowlistModuleDeps) {
  const context: AllowlistContext = {
    db: deps.db,
    ledger: deps.ledger,
    clock: deps.clock,
    screening: deps.screening,
    wakeSweep: (wallMs) => sweep.wake(wallMs),
  }
  const sweep = new DueSweep(
    { name: 'allowlist', backstopMs: ACTIVATION_SWEEP_BACKSTOP_MS, minGapMs: ACTIVATION_SWEEP_MIN_GAP_MS, wallNowMs: () => deps.clock.wallNowMs() },
    () => activateAllDue(context),
  )
  return {
    routes: allowlistRoutes(context, deps.access),
    /** The entry a withdrawal names, if it can be used now (activated here if its timelock has just ended). */
    requireActiveEntry: (orgId: string, id: string, field: string) => requireActiveEntry(context, orgId, id, field),
    /** One activation pass, as the sweep runs it. */
    activateAllDue: () => activateAllDue(context),
    start(): void {
      // After a sandbox clock advance the answer already reflects the entries that became active.
      deps.clock.onAdvance(async (orgId) => {
        await activateDueEntries(context, orgId)
        sweep.wake()
      })
      sweep.start()
    },
    stop: () => sweep.stop(),
  }
}

export type AllowlistModule = ReturnType<typeof createAllowlistModule>
