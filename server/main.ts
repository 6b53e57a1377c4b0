import { installPostgresDriverPatch } from '../db/postgres-driver-patch.ts'
import { ConfigError, gcTimerSummary, loadConfig } from './config.ts'
import { requestThreadFirst } from './platform/thread-priority.ts'

// Before anything loads the postgres.js driver: it must be loaded with its crash guard.
installPostgresDriverPatch()
const { createApp } = await import('./app.ts')

async function main(): Promise<void> {
  let config
  try {
    config = loadConfig()
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`kassa: configuration error: ${error.message}`)
      process.exit(2)
    }
    throw error
  }
  const kassa = await createApp(config)
  kassa.app.listen({ port: config.port, hostname: config.host, maxRequestBodySize: config.bodyLimitBytes + 1024 })
  const server = kassa.app.server!
  console.log(
    `kassa ${config.serviceEnv} listening on http://${server.hostname}:${server.port} ` +
      `(database: ${config.databaseUrl ? 'postgres' : `embedded at ${config.dataDir}`})`,
  )
  const priority = config.requestThreadFirst ? await requestThreadFirst() : undefined
  console.log(`kassa: request thread first: ${priority ? priority.summary : 'off (REQUEST_THREAD_FIRST=false)'}`)
  console.log(`kassa: Bun's idle GC timer: ${gcTimerSummary()}`)
  const shutdown = async (signal: string) => {
    console.log(`kassa: ${signal}, shutting down`)
    priority?.stop()
    await kassa.close()
    process.exit(0)
  }
  process.on('SIGINT', () => void shutdown('SIGINT'))
  process.on('SIGTERM', () => void shutdown('SIGTERM'))
}

await main()
