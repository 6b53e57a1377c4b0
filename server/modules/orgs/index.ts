import type { IdempotencyStore } from '../../platform/idempotency.ts'
import { orgsOpsRoutes } from './routes.ts'
import { withdrawalApprovalThresholdMinor, type OrgsContext } from './service.ts'

export interface OrgsModuleDeps extends OrgsContext {
  /** The operator routes that create (organizations, keys) run once per Idempotency-Key. */
  idempotency: IdempotencyStore
}

/** Organizations, their keys, limits and withdrawal approval thresholds (operator routes). Nothing runs in the background. */
export function createOrgsModule(deps: OrgsModuleDeps) {
  const context: OrgsContext = { db: deps.db, keys: deps.keys, clock: deps.clock }
  return {
    opsRoutes: orgsOpsRoutes(context, deps.idempotency),
    /** The amount above which a withdrawal of this asset waits for a second approval (the withdrawals module's). */
    approvalThresholdMinor: (orgId: string, asset: string) => withdrawalApprovalThresholdMinor(context, orgId, asset),
  }
}
