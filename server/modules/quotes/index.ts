import type { AccessPlugin } from '../../platform/access.ts'
import { quotesRoutes } from './routes.ts'
import type { InstantRedeemQuoter, QuotesDeps } from './service.ts'

export interface QuotesModuleDeps extends QuotesDeps {
  access: AccessPlugin
  /** Prices instant redemptions (earning); without it such a quote is refused. */
  instantRedeem?: InstantRedeemQuoter
}

/** Quotes for withdrawals and instant redemptions; withdrawals and earning consume them. */
export function createQuotesModule(deps: QuotesModuleDeps) {
  return { routes: quotesRoutes({ db: deps.db, ledger: deps.ledger, clock: deps.clock }, deps.access, deps.instantRedeem) }
}
