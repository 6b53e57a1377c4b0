import type { AccessPlugin } from '../../platform/access.ts'
import { transfersRoutes } from './routes.ts'
import { executeTransfer, type TransferExecutor, type TransfersDeps } from './service.ts'

export interface TransfersModuleDeps extends TransfersDeps {
  access: AccessPlugin
}

/** Transfers between two accounts of an organization, from available or from a pending hold. */
export function createTransfersModule(deps: TransfersModuleDeps) {
  const { access, ...service } = deps
  const executor: TransferExecutor = { execute: (orgId, request) => executeTransfer(service, orgId, request) }
  return { routes: transfersRoutes(service, access), executor }
}

export type TransfersModule = ReturnType<typeof createTransfersModule>
