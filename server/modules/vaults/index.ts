import type { Database } from '../../../db/client.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { OperatorIdempotencyPlugin } from '../../platform/operator-idempotency.ts'
import { VaultClock } from './clock.ts'
import { vaultsOpsRoutes, vaultsPublicRoutes } from './routes.ts'
import { VaultCatalog, type AuditOperatorAction } from './service.ts'
import { SandboxVenue, type VaultVenue } from './venue.ts'

export interface VaultsModuleDeps {
  db: Database
  wallNowMs: () => number
  /** `sandbox` runs the venue simulator; production has no adapter (config refuses it before this). */
  venue: 'sandbox'
  access: AccessPlugin
  /** Idempotency-Key for the operator routes' writes. */
  opsIdempotency: OperatorIdempotencyPlugin
  /** Records the operator actions (pause, unpause) with their changes, in the operator audit trail. */
  audit: AuditOperatorAction
}

/** The vault catalog, prices, the vaults' clock and the venue behind them. */
export async function createVaultsModule(deps: VaultsModuleDeps) {
  const clock = new VaultClock(deps.db, deps.wallNowMs)
  await clock.load()
  const venue: VaultVenue = new SandboxVenue(deps.db)
  const catalog = new VaultCatalog({ db: deps.db, clock, venue })
  return {
    catalog,
    clock,
    venue,
    routes: vaultsPublicRoutes(catalog, deps.access),
    opsRoutes: vaultsOpsRoutes(catalog, clock, venue.kind === 'sandbox', deps.opsIdempotency, deps.audit),
  }
}

export type VaultsModule = Awaited<ReturnType<typeof createVaultsModule>>
