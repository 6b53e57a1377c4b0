import { join } from 'node:path'
import { ConfigError, loadConfig } from '../server/config.ts'
import { openDatabase, runMigrations } from './client.ts'

/** `bun run db:migrate`: applies pending migrations to the configured database and exits. */
try {
  const config = loadConfig()
  const handle = await openDatabase({ databaseUrl: config.databaseUrl, embeddedPath: join(config.dataDir, 'pglite'), poolMax: 1 })
  await runMigrations(handle, config.databaseUrl)
  await handle.close()
  console.log(`migrations applied (${config.databaseUrl ? 'postgres' : `embedded at ${config.dataDir}`})`)
} catch (error) {
  if (error instanceof ConfigError) {
    console.error(`kassa: configuration error: ${error.message}`)
    process.exit(2)
  }
  throw error
}
