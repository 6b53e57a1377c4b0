import { DueSweep, whenDue } from '../../platform/due-sweep.ts'
import type { Runtime } from '../../runtime.ts'
import { SandboxChain } from './simulator.ts'

/**
 * The simulator settles withdrawals when the earliest reaches finality as time passes on its own
 * (see `DueSweep`), and looks at least this often for what another instance submitted.
 */
const SETTLE_SWEEP_BACKSTOP_MS = 2000
/** The least time between passes while work stays due (the interval the sweep used to poll at). */
const SETTLE_SWEEP_MIN_GAP_MS = 250

/** The sandbox simulator behind `runtime.chain`, for the sandbox routes; undefined with another adapter. */
export function sandboxChainOf(runtime: Runtime): SandboxChain | undefined {
  return runtime.chain instanceof SandboxChain ? runtime.chain : undefined
}

/**
 * Settles the simulator's withdrawals in the background, and for an organization right after its
 * clock is advanced (so the advance's answer already reflects what became final).
 */
export function startChain(runtime: Runtime): void {
  const simulator = sandboxChainOf(runtime)
  if (!simulator) return
  const wallNowMs = () => runtime.clock.wallNowMs()
  const sweep = new DueSweep({ name: 'chain', backstopMs: SETTLE_SWEEP_BACKSTOP_MS, minGapMs: SETTLE_SWEEP_MIN_GAP_MS, wallNowMs }, () =>
    whenDue(wallNowMs, () => simulator.nextDueWallMs(), () => simulator.settleDue()),
  )
  simulator.onDue((wallMs) => sweep.wake(wallMs))
  runtime.clock.onAdvance(async (orgId) => {
    await simulator.settleDue(orgId)
    // The organization's later withdrawals now reach finality earlier.
    sweep.wake()
  })
  sweep.start()
  runtime.stoppers.push(() => sweep.stop())
}
