import type { IdempotencyStore } from '../../platform/idempotency.ts'
import { operatorRoutes } from './routes.ts'
import { createOperatorService, type OperatorContext } from './service.ts'

export interface OperatorModuleDeps extends OperatorContext {
  idempotency: IdempotencyStore
}

/**
 * What the operator console needs from the server: the cross-organization approval queue, operator
 * actions recorded in an audit trail, and the event log as a stream. Nothing runs in the background.
 */
export function createOperatorModule(deps: OperatorModuleDeps) {
  const service = createOperatorService({ db: deps.db, clock: deps.clock, screening: deps.screening, operatorToken: deps.operatorToken, withdrawals: deps.withdrawals })
  return { service, routes: operatorRoutes(deps.db, service, deps.idempotency) }
}
