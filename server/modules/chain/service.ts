import type { Runtime } from '../../runtime.ts'
import { SandboxChain } from './simulator.ts'

/** How often the simulator looks for withdrawals that reached finality as time passes on its own. */
const SETTLE_SWEEP_INTERVAL_MS = 250

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
  runtime.clock.onAdvance((orgId) => simulator.settleDue(orgId))
  let sweeping: Promise<unknown> | undefined
  const timer = setInterval(() => {
    if (sweeping) return
    sweeping = simulator
      .settleDue()
      .catch((error: unknown) => console.error('chain: settle sweep failed; the next sweep retries', error))
      .finally(() => {
        sweeping = undefined
      })
  }, SETTLE_SWEEP_INTERVAL_MS)
  timer.unref()
  runtime.stoppers.push(async () => {
    clearInterval(timer)
    await sweeping
  })
}
