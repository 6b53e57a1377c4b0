import type { IdempotencyStore } from '../../platform/idempotency.ts'
import type { Runtime } from '../../runtime.ts'
import { operatorRoutes } from './routes.ts'
import { createOperatorService } from './service.ts'

/**
 * What the operator console needs from the server: the cross-organization approval queue, operator
 * actions recorded in an audit trail, and the event log as a stream.
 */
export function createOperatorModule({ runtime, idempotency }: { runtime: Runtime; idempotency: IdempotencyStore }) {
  const service = createOperatorService(runtime)
  return { service, routes: operatorRoutes(runtime, service, idempotency) }
}
