import type { Database, DatabaseHandle } from '../../../db/client.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { Clock } from '../clock/clock.ts'
import { webhooksRoutes } from './routes.ts'
import type { WebhooksContext } from './service.ts'
import { createWebhookDelivery, kickDelivery } from './delivery.ts'
import type { WorkerOptions } from './worker.ts'

export interface WebhooksModuleDeps {
  db: Database
  database: Pick<DatabaseHandle, 'listen'>
  clock: Clock
  access: AccessPlugin
  config: {
    allowLoopbackWebhooks: boolean
    webhookCaFile: string | undefined
    /** WEBHOOK_DELIVERY: false runs no worker anywhere for this server. */
    webhookDelivery: boolean
    /** WEBHOOK_DELIVERY_PROCESS: the worker runs in the delivery process beside this one, not here. */
    webhookDeliveryProcess: boolean
  }
  /** The worker's pacing (tests shorten the attempt timeout); the defaults otherwise. */
  workerOptions?: WorkerOptions
}

/**
 * Webhook endpoints and, where it runs in this process, the delivery worker. `start` starts the
 * worker (requests only write events: delivery runs beside them, never inside); `stop` ends it.
 * `delivery` is undefined when the worker runs elsewhere or not at all.
 */
export function createWebhooksModule(deps: WebhooksModuleDeps) {
  const runsHere = deps.config.webhookDelivery && !deps.config.webhookDeliveryProcess
  const delivery = runsHere ? createWebhookDelivery({ db: deps.db, clock: deps.clock, database: deps.database, config: deps.config, options: deps.workerOptions }) : undefined
  const context: WebhooksContext = {
    db: deps.db,
    clock: deps.clock,
    config: deps.config,
    abortLocalAttempts: (webhookId) => delivery?.worker.abortEndpoint(webhookId),
  }
  return {
    routes: webhooksRoutes(context, deps.access),
    delivery,
    /** A resend is due now: every instance's worker looks at once (the events module's resends). */
    kickDelivery: () => kickDelivery(deps.db, delivery?.worker),
    start: async (): Promise<void> => delivery?.start(),
    stop: async (): Promise<void> => delivery?.stop(),
  }
}

export type WebhooksModule = ReturnType<typeof createWebhooksModule>
