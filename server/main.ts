import { loadConfigOrExit } from './config.ts'
import { startDeliveryProcess } from './platform/delivery-process.ts'
import { DataFolderInUse } from '../db/folder-lock.ts'
import { createApp } from './app.ts'
import { warmUp, warmUpSummary } from './warm-up.ts'
import { BUN_BODY_BACKSTOP_BYTES } from './platform/body.ts'
import { DatabaseInUse, DatabaseUnavailable, describeConnectFailure, describeHolder, takeServingLock, type ServingLock } from '../db/serving-lock.ts'

/** Why `host:port` cannot be listened on, or undefined when it can (port 0 always can). */
function portRefusal(host: string, port: number): string | undefined {
  if (port === 0) return undefined
  try {
    Bun.listen({ hostname: host, port, socket: { data() {} } }).stop(true)
    return undefined
  } catch (error) {
    return (error as Error).message
  }
}

/** Says why the start is refused, in one line, and exits with `code`: nothing was created or printed before. */
function refuseStart(message: string, code: number): never {
  console.error(`kassa: ${message}`)
  process.exit(code)
}

async function main(): Promise<void> {
  const config = loadConfigOrExit('kassa')
  // Before anything is created or printed (a data folder, an operator token, a warm-up): a port in
  // use, an unreachable database and a database another server serves each refuse the start at once.
  const refusedPort = portRefusal(config.host, config.port)
  if (refusedPort !== undefined) {
    refuseStart(`could not listen on ${config.host}:${config.port}: ${refusedPort}. Stop the server using it, or set PORT to another port.`, 1)
  }
  let servingLock: ServingLock | undefined
  if (config.databaseUrl !== undefined) {
    try {
      servingLock = await takeServingLock(config.databaseUrl, {
        // A cluster's servers share the database (each holds the lock shared); a lone server holds it alone.
        clusterMember: config.cluster !== undefined,
        log: (line) => console.error(line),
        onLost: (holder) => {
          // Another server took the database while this one's lock connection was away: two
          // writers must not serve one database, so this one stops.
          console.error(`kassa: this server lost its database lock to another server${holder ? ` (${describeHolder(holder)})` : ''}; stopping`)
          void shutdown('lost database lock', 1)
        },
      })
    } catch (error) {
      if (error instanceof DatabaseUnavailable) refuseStart(`configuration error: ${error.message}`, 2)
      if (error instanceof DatabaseInUse) refuseStart(error.message, 1)
      throw error
    }
  }
  // Before the server's own instance opens: the warm-up's instance is closed and its database
  // dropped before this one loads a balance, and a refused warm-up changes nothing of the start.
  // A stop asked for meanwhile ends it, drops its database, and ends the start.
  const stopWarmUp = new AbortController()
  const onSignalWhileWarming = (signal: NodeJS.Signals) => stopWarmUp.abort(signal)
  process.once('SIGINT', onSignalWhileWarming)
  process.once('SIGTERM', onSignalWhileWarming)
  const warm = config.warmUpAuthorizations > 0 ? await warmUp({ ...config, cluster: undefined }, createApp, { signal: stopWarmUp.signal, onCreated: (name) => console.log(`kassa: warm-up database: ${name}`) }) : undefined
  process.off('SIGINT', onSignalWhileWarming)
  process.off('SIGTERM', onSignalWhileWarming)
  console.log(`kassa: warm-up: ${warmUpSummary(config, warm)}`)
  if (stopWarmUp.signal.aborted) {
    console.log(`kassa: ${String(stopWarmUp.signal.reason)} while warming up, not started`)
    await servingLock?.release()
    process.exit(0)
  }
  let kassa: Awaited<ReturnType<typeof createApp>>
  try {
    kassa = await createApp(config)
  } catch (error) {
    if (error instanceof DataFolderInUse) refuseStart(error.message, 1)
    // The database went away (or was dropped) between the lock and the migrations.
    const unreachable = config.databaseUrl === undefined ? undefined : describeConnectFailure((error as { cause?: unknown }).cause ?? error, config.databaseUrl)
    if (unreachable !== undefined) refuseStart(`configuration error: ${unreachable}`, 2)
    throw error
  }
  try {
    // Not Elysia's default of a shared port: a second server started on a port in use would take
    // half its connections, each with balances of its own in memory. It is refused instead.
    // Bun's own cap on a body is only a backstop, far above BODY_LIMIT_BYTES: Bun refuses past it
    // with an empty 413, where the body plugin refuses past the limit (from Content-Length before
    // reading, or as a stream arrives) with the error body every refusal has.
    kassa.app.listen({ port: config.port, hostname: config.host, maxRequestBodySize: BUN_BODY_BACKSTOP_BYTES, reusePort: false })
  } catch (error) {
    // Taken between the check above and now.
    console.error(`kassa: could not listen on ${config.host}:${config.port}: ${(error as Error).message} Stop the server using it, or set PORT to another port.`)
    await kassa.close()
    await servingLock?.release()
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
  await servingLock?.announce(`${server.hostname}:${server.port}`)
  const cluster = kassa.runtime.cluster
  if (cluster !== undefined) {
    try {
      const { address } = await cluster.start(
        {
          ledger: kassa.runtime.ledger,
          db: kassa.runtime.db,
          keys: kassa.runtime.keys,
          wallNowMs: () => kassa.runtime.clock.wallNowMs(),
          handle: (request) => kassa.handle(request),
          loaders: [(orgIds) => kassa.payments.loadAuthorizedHolds(orgIds)],
          log: (line) => console.log(`kassa: ${line}`),
        },
        config.host,
      )
      // Before the database closes: partitions are given back, drained, for a peer to take at once.
      kassa.runtime.stoppers.unshift(() => cluster.stop())
      console.log(`kassa: cluster member ${cluster.instanceId}, internal listener on ${address}, ${cluster.partitionCount} partitions`)
    } catch (error) {
      console.error(`kassa: could not join the cluster: ${(error as Error).message}`)
      await kassa.close()
      await servingLock?.release()
      process.exit(1)
    }
  }
  console.log(
    `kassa ${config.serviceEnv} listening on http://${server.hostname}:${server.port} ` +
      `(database: ${config.databaseUrl ? 'postgres' : `embedded at ${config.dataDir}`})`,
  )
  // After the line above, which tools read for the main listener's address.
  console.log(`kassa: SBT data API on http://${kassa.sbt.app.server!.hostname}:${kassa.sbt.app.server!.port} (OpenAPI at /openapi.json)`)
  // Started once the server listens: a start refused above leaves no worker behind.
  const delivery = config.webhookDelivery && config.webhookDeliveryProcess ? startDeliveryProcess(config.webhookDeliveryNice) : undefined
  console.log(
    `kassa: webhook delivery: ${!config.webhookDelivery ? 'off (WEBHOOK_DELIVERY=false)' : delivery ? `${delivery.summary}, pid ${delivery.pid}` : `in this process (${config.databaseUrl === undefined ? 'the embedded database is open in it alone' : 'WEBHOOK_DELIVERY_PROCESS=false'})`}`,
  )
  stopServer = async (signal: string, code: number) => {
    console.log(`kassa: ${signal}, shutting down`)
    await delivery?.stop()
    await kassa.close()
    await servingLock?.release()
    process.exit(code)
  }
  process.on('SIGINT', () => void shutdown('SIGINT', 0))
  process.on('SIGTERM', () => void shutdown('SIGTERM', 0))
}

/** Set once the server listens; before that, a stop ends the process at once. */
let stopServer: ((signal: string, code: number) => Promise<void>) | undefined
let stopping = false

async function shutdown(signal: string, code: number): Promise<void> {
  if (stopping) return
  stopping = true
  if (stopServer === undefined) process.exit(code)
  await stopServer(signal, code)
}

await main()
