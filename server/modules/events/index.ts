import type { AccessPlugin } from '../../platform/access.ts'
import { eventsOpsRoutes, eventsRoutes } from './routes.ts'
import type { EventsContext } from './service.ts'

export interface EventsModuleDeps extends EventsContext {
  access: AccessPlugin
}

/** The event log as partners and operators read it, and its resends. Nothing runs in the background. */
export function createEventsModule(deps: EventsModuleDeps) {
  const context: EventsContext = { db: deps.db, clock: deps.clock, kickDelivery: deps.kickDelivery }
  return { routes: eventsRoutes(context, deps.access), opsRoutes: eventsOpsRoutes(context) }
}
