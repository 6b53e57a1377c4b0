import type { AccessPlugin } from '../../platform/access.ts'
import { balancesRoutes, sandboxFundingRoutes } from './routes.ts'
import type { AllocationSource, BalancesDeps } from './service.ts'

export interface BalancesModuleDeps extends BalancesDeps {
  access: AccessPlugin
  /** Vault positions valued for the balance (earning); none when earning is off. */
  allocations?: AllocationSource
}

/** Balances read from memory, and the sandbox faucet (`sandboxRoutes`, mounted only in sandbox). */
export function createBalancesModule(deps: BalancesModuleDeps) {
  const service: BalancesDeps = { ledger: deps.ledger, clock: deps.clock }
  return { routes: balancesRoutes(service, deps.access, deps.allocations), sandboxRoutes: sandboxFundingRoutes(service, deps.access) }
}
