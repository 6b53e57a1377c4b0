import { installPostgresDriverPatch } from '../db/postgres-driver-patch.ts'
import { gcTimerSummary, heapWarmUpSummary, loadConfigOrExit } from './config.ts'
import { requestThreadFirst } from './platform/thread-priority.ts'
import { startDeliveryProcess } from './platform/delivery-process.ts'
import { DataFolderInUse } from '../db/folder-lock.ts'

// Before anything loads the postgres.js driver: it must be loaded with its crash guard.
installPostgresDriverPatch()
const { createApp } = await import('./app.ts')
const { warmUp, warmUpSummary } = await import('./platform/warm-up.ts')

async function main(): Promise<void> {
  const config = loadConfigOrExit('kassa')
  // Before the server's own instance opens: the warm-up's instance is closed and its database
  // dropped before this one loads a balance, and a refused warm-up changes nothing of the start.
  // A stop asked for meanwhile ends it, drops its database, and ends the start.
  const stopWarmUp = new AbortController()
  const onSignalWhileWarming = (signal: NodeJS.Signals) => stopWarmUp.abort(signal)
  process.once('SIGINT', onSignalWhileWarming)
  process.once('SIGTERM', onSignalWhileWarming)
  const warm = config.warmUpAuthorizations > 0 ? await warmUp(config, createApp, { signal: stopWarmUp.signal }) : undefined
  process.off('SIGINT', onSignalWhileWarming)
  process.off('SIGTERM', onSignalWhileWarming)
  console.log(`kassa: warm-up: ${warmUpSummary(config, warm)}`)
  if (stopWarmUp.signal.aborted) {
    console.log(`kassa: ${String(stopWarmUp.signal.reason)} while warming up, not started`)
    process.exit(0)
  }
  let kassa
  try {
    kassa = await createApp(config)
  } catch (error) {
    if (error instanceof DataFolderInUse) {
      console.error(`kassa: ${error.message}`)
      process.exit(1)
    }
    throw error
  }
  try {
    // Not Elysia's default of a shared port: a second server started on a port in use would take
    // half its connections, each with balances of its own in memory. It is refused instead.
    kassa.app.listen({ port: config.port, hostname: config.host, maxRequestBodySize: config.bodyLimitBytes + 1024, reusePort: false })
  } catch (error) {
    console.error(`kassa: could not listen on ${config.host}:${config.port}: ${(error as Error).message} Stop the server using it, or set PORT to another port.`)
    await kassa.close()
    process.exit(1)
  }
  try {
    kassa.sbt.start(config.sbtPort)
  } catch (error) {
    console.error(`kassa: could not listen on ${config.host}:${config.sbtPort} for the SBT data API: ${(error as Error).message} Set SBT_PORT to another port.`)
    await kassa.close()
    process.exit(1)
  }
  const server = kassa.app.server!
  console.log(
    `kassa ${config.serviceEnv} listening on http://${server.hostname}:${server.port} ` +
      `(database: ${config.databaseUrl ? 'postgres' : `embedded at ${config.dataDir}`})`,
  )
  // After the line above, which tools read for the main listener's address.
  console.log(`kassa: SBT data API on http://${kassa.sbt.app.server!.hostname}:${kassa.sbt.app.server!.port} (OpenAPI at /openapi.json)`)
  const priority = config.requestThreadFirst ? await requestThreadFirst() : undefined
  console.log(`kassa: request thread first: ${priority ? priority.summary : 'off (REQUEST_THREAD_FIRST=false)'}`)
  console.log(`kassa: Bun's idle GC timer: ${gcTimerSummary()}`)
  console.log(`kassa: the engine's heap warm-up thread: ${heapWarmUpSummary()}`)
  // Started once the server listens: a start refused above leaves no worker behind.
  const delivery = config.webhookDelivery && config.webhookDeliveryProcess ? startDeliveryProcess(config.webhookDeliveryNice) : undefined
  console.log(
    `kassa: webhook delivery: ${!config.webhookDelivery ? 'off (WEBHOOK_DELIVERY=false)' : delivery ? `${delivery.summary}, pid ${delivery.pid}` : `in this process (${config.databaseUrl === undefined ? 'the embedded database is open in it alone' : 'WEBHOOK_DELIVERY_PROCESS=false'})`}`,
  )
  const shutdown = async (signal: string) => {
    console.log(`kassa: ${signal}, shutting down`)
    priority?.stop()
    await delivery?.stop()
    await kassa.close()
    process.exit(0)
  }
  process.on('SIGINT', () => void shutdown('SIGINT'))
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
}

await main()
