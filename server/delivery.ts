import { loadConfigOrExit } from './config.ts'
import { closeRuntime, createDeliveryRuntime } from './runtime.ts'
import { createWebhookDelivery } from './modules/webhooks/delivery.ts'

/**
 * The webhook delivery process: the delivery worker alone, started by a listening server beside
 * itself (`WEBHOOK_DELIVERY_PROCESS`, the default on Postgres; `server/platform/delivery-process.ts`)
 * at the lowest priority by default (`WEBHOOK_DELIVERY_NICE`), so that signing, sending and
 * recording deliveries never run on the thread that answers requests, and take a core only when
 * the server and Postgres leave one idle.
 * It reads the same configuration as its server, reaches the same database with a pool of its
 * own, and works as any other instance's worker does (the cursor row serializes fan-out, a
 * conditional update claims each due delivery). It ends when its server does: on SIGTERM, and when
 * its standard input, held open by the server, closes (the server ended, even by `kill -9`).
 */

const config = loadConfigOrExit('kassa delivery')
if (config.databaseUrl === undefined) {
  console.error('kassa delivery: needs DATABASE_URL (the embedded database is open in its server alone)')
  process.exit(2)
}

const runtime = await createDeliveryRuntime(config)
const delivery = createWebhookDelivery({ db: runtime.db, database: runtime.database, clock: runtime.clock, config })
await delivery.start()
runtime.stoppers.push(() => delivery.stop())
console.log(`kassa delivery: webhook delivery worker running (pid ${process.pid})`)

let stopping: Promise<void> | undefined
function shutdown(reason: string): Promise<void> {
  stopping ??= (async () => {
    console.log(`kassa delivery: ${reason}, stopping`)
    await closeRuntime(runtime)
    process.exit(0)
  })()
  return stopping
}
process.on('SIGTERM', () => void shutdown('SIGTERM'))
process.on('SIGINT', () => void shutdown('SIGINT'))

// The server holds the write end of this process's standard input: it closes when the server
// ends, however it ends.
for await (const _ of Bun.stdin.stream()) {
  // Nothing is sent; reading only waits for the end.
}
await shutdown('its server ended')
