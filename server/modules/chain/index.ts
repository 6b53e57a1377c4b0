import type { AccessPlugin } from '../../platform/access.ts'
import { DueSweep, whenDue } from '../../platform/due-sweep.ts'
import type { Clock } from '../clock/clock.ts'
import type { ChainAdapter } from './adapter.ts'
import { sandboxChainRoutes, type ArrivalsReporter } from './routes.ts'
import { SandboxChain } from './simulator.ts'

/**
 * The simulator settles withdrawals when the earliest reaches finality as time passes on its own
 * (see `DueSweep`), and looks at least this often for what another instance submitted.
 */
const SETTLE_SWEEP_BACKSTOP_MS = 2000
/** The least time between passes while work stays due (the interval the sweep used to poll at). */
const SETTLE_SWEEP_MIN_GAP_MS = 250

export interface ChainModuleDeps {
  /** The adapter withdrawals broadcast through: the sandbox simulator, or one that never sends. */
  chain: ChainAdapter
  clock: Clock
  access: AccessPlugin
  /** Where the simulator's arrivals go: the deposits module. */
  arrivals: ArrivalsReporter
}

/**
 * The chain: with the sandbox simulator, its routes (arrivals, a withdrawal's transaction, a
 * failure made on purpose) and the sweep that settles its withdrawals in the background, and for
 * an organization right after its clock is advanced (so the advance's answer already reflects what
 * became final). With any other adapter there is nothing to run and no route.
 */
export function createChainModule(deps: ChainModuleDeps) {
  // The simulator is a sandbox tool: the routes exist only where it runs.
  const simulator = deps.chain instanceof SandboxChain ? deps.chain : undefined
  const wallNowMs = () => deps.clock.wallNowMs()
  const sweep =
    simulator &&
    new DueSweep({ name: 'chain', backstopMs: SETTLE_SWEEP_BACKSTOP_MS, minGapMs: SETTLE_SWEEP_MIN_GAP_MS, wallNowMs }, () =>
      whenDue(wallNowMs, () => simulator.nextDueWallMs(), () => simulator.settleDue()),
    )
  return {
    simulator,
    sandboxRoutes: sandboxChainRoutes({ simulator, arrivals: deps.arrivals }, deps.access),
    /** Starts delivering outcomes: the withdrawals' outcome listener must be registered before. */
    start(): void {
      if (!simulator || !sweep) return
      simulator.onDue((wallMs) => sweep.wake(wallMs))
      deps.clock.onAdvance(async (orgId) => {
        await simulator.settleDue(orgId)
        // The organization's later withdrawals now reach finality earlier.
        sweep.wake()
      })
      sweep.start()
    },
    async stop(): Promise<void> {
      await sweep?.stop()
    },
  }
}

export type ChainModule = ReturnType<typeof createChainModule>
