import { notify, type Database, type DatabaseHandle } from '../../../db/client.ts'
import { WEBHOOK_CHANNEL } from './service.ts'
import { DEFAULT_WORKER_OPTIONS, DeliveryWorker, type DeliveryWorkerDeps, type WorkerOptions } from './worker.ts'

/** Said on `WEBHOOK_CHANNEL` for work due now (every other payload names a deleted endpoint). */
const KICK_NOTICE = 'kick'

/**
 * Work is due now (a resend): this process's worker, if one runs here, looks at once, and every
 * other instance's, the delivery process's among them, when the notice reaches it, rather than at
 * its next poll.
 */
export async function kickDelivery(db: Database, local: DeliveryWorker | undefined): Promise<void> {
  local?.kick()
  await notify(db, WEBHOOK_CHANNEL, KICK_NOTICE)
}

export interface WebhookDeliveryDeps extends DeliveryWorkerDeps {
  /** Where the worker hears of resends and deleted endpoints (`WEBHOOK_CHANNEL`). */
  database: Pick<DatabaseHandle, 'listen'>
  options?: WorkerOptions
}

/**
 * This process's delivery worker as a value: `start` listens for other instances' notices and
 * starts the worker's passes, `stop` ends them, and `worker.runOnce()` is the single pass tests
 * drive. A server runs one unless delivery is off or runs in the delivery process beside it
 * (`createWebhooksModule`); the delivery process (`server/delivery.ts`) runs one alone.
 */
export function createWebhookDelivery(deps: WebhookDeliveryDeps) {
  const worker = new DeliveryWorker(deps, deps.options ?? DEFAULT_WORKER_OPTIONS)
  return {
    worker,
    async start(): Promise<void> {
      await deps.database.listen(WEBHOOK_CHANNEL, (payload) => (payload === KICK_NOTICE ? worker.kick() : worker.abortEndpoint(payload)))
      worker.start()
    },
    stop: () => worker.stop(),
  }
}

export type WebhookDelivery = ReturnType<typeof createWebhookDelivery>
