import type { Database } from '../../../db/client.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { Clock } from '../clock/clock.ts'
import { sandboxRoutes } from './routes.ts'

export interface SandboxModuleDeps {
  /** Where an advance is announced to the other instances (`CHANGE_CHANNEL`). */
  db: Database
  clock: Clock
  access: AccessPlugin
}

/** The organization's sandbox clock (read and advance); `app.ts` mounts it in sandbox only. Nothing runs in the background. */
export function createSandboxModule(deps: SandboxModuleDeps) {
  return { routes: sandboxRoutes({ db: deps.db, clock: deps.clock }, deps.access) }
}
