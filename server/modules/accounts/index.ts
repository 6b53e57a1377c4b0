import type { AccessPlugin } from '../../platform/access.ts'
import { accountsRoutes } from './routes.ts'
import type { AccountsContext } from './service.ts'

export interface AccountsModuleDeps extends AccountsContext {
  access: AccessPlugin
}

/** Accounts and their KYC attestations. Nothing runs in the background. */
export function createAccountsModule(deps: AccountsModuleDeps) {
  const context: AccountsContext = { db: deps.db, ledger: deps.ledger, clock: deps.clock }
  return { routes: accountsRoutes(context, deps.access) }
}
