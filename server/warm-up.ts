import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import type { createApp as CreateApp } from './app.ts'
import type { Config } from './config.ts'
import { socketOf, withDatabaseName } from '../db/client.ts'
import { randomToken } from './lib/hash.ts'

/**
 * A Postgres server's warm-up before it listens: authorizations made one at a time, each its own
 * batch as at 1000/s, through a second, throwaway instance of the app with this server's own
 * settings, on a throwaway database of its own on the same Postgres server; the instance is closed
 * and the database dropped before the server takes traffic.
 *
 * Why: a fresh process answered its first seconds of authorizations slower than the same process
 * once warm (at 1000/s, p99 about 5 ms against 3 to 4; eight-second runs of
 * `npm run bench`; docs/architecture.md, "The warm-up before listening"). The cause was the process's own (not its Postgres or
 * HTTP connections, nor the load generator), and what lowered it was the path itself run as it will
 * run: this server's settings, lone batches, a real Postgres connection. Declines, reads, or the
 * same path on PGlite or with the tests' settings did not.
 *
 * Nothing of it reaches the server's own database: the organization, accounts, payments and events
 * are written to the throwaway one. Creating a database needs the CREATEDB privilege; without it,
 * or on any failure, the warm-up is skipped, said in the log, and the server starts as it would
 * have. A database a killed process left behind is dropped by the next start once it is an hour
 * old (a younger one may be another server's warm-up under way).
 */

/** The names of warm-up databases: the prefix, the creation time (base 36 milliseconds), a random suffix. */
export const WARM_UP_DATABASE_PREFIX = 'kassa_warmup_'

/**
 * The warm-up's authorizations stop after this, whatever their count, so that a slow database
 * cannot hold a start for long (opening the throwaway instance and its accounts comes before it).
 */
export const WARM_UP_TIME_LIMIT_MS = 30_000

/** Leftover warm-up databases younger than this are left alone: they may be another server's, under way. */
const LEFTOVER_AGE_MS = 60 * 60 * 1000

/** Accounts the authorizations go round, as partners' traffic spreads over accounts. */
const WARM_UP_ACCOUNTS = 32

export interface WarmUpOptions {
  /** Authorizations to make (default: the config's). */
  count?: number
  /** The time leftovers are judged against and the new database is named with (default: now). */
  nowMs?: number
  /**
   * Ends the warm-up early (a stop asked for while the server starts): the authorizations stop, the
   * instance is closed and the database dropped, and the result says so.
   */
  signal?: AbortSignal
  /** Told the throwaway database's name once it is created (the start log names it). */
  onCreated?: (name: string) => void
}

export interface WarmUpResult {
  /** Authorizations made (approved or not); 0 when skipped. */
  authorizations: number
  approved: number
  elapsedMs: number
  /** Leftover warm-up databases dropped before this one was created. */
  leftoversDropped: string[]
  /** Why none was made, when none was. */
  skipped?: string
}

/** The line `server/main.ts` prints. */
export function warmUpSummary(config: Config, result: WarmUpResult | undefined): string {
  if (result === undefined) {
    return config.databaseUrl === undefined ? 'none (the embedded database)' : 'off (WARM_UP_AUTHORIZATIONS=0)'
  }
  const leftovers = result.leftoversDropped.length > 0 ? `; dropped ${result.leftoversDropped.length} left behind by an earlier start` : ''
  if (result.skipped !== undefined) return `skipped: ${result.skipped}${leftovers}`
  return `${result.authorizations.toLocaleString('en-US')} authorizations one at a time (${result.approved.toLocaleString('en-US')} approved) on a throwaway database, ${(result.elapsedMs / 1000).toFixed(1)} s${leftovers}`
}

/** When a warm-up database was created, from its name; undefined for a name not of that form. */
export function warmUpDatabaseCreatedMs(name: string): number | undefined {
  if (!name.startsWith(WARM_UP_DATABASE_PREFIX)) return undefined
  const match = /^([0-9a-z]{1,11})_[0-9a-z]+$/.exec(name.slice(WARM_UP_DATABASE_PREFIX.length))
  if (match === null) return undefined
  const ms = Number.parseInt(match[1]!, 36)
  return Number.isSafeInteger(ms) ? ms : undefined
}

/**
 * Runs the warm-up for a server about to start on `config.databaseUrl`. Never throws for what the
 * database refuses or a failure of the throwaway instance: the result says why it was skipped.
 */
export async function warmUp(config: Config, createApp: typeof CreateApp, options: WarmUpOptions = {}): Promise<WarmUpResult> {
  const { count = config.warmUpAuthorizations, nowMs = Date.now(), signal, onCreated } = options
  if (config.databaseUrl === undefined) throw new Error('warm-up needs a Postgres server (DATABASE_URL)')
  const started = performance.now()
  const result: WarmUpResult = { authorizations: 0, approved: 0, elapsedMs: 0, leftoversDropped: [] }
  const { url, host } = socketOf(config.databaseUrl)
  const admin = postgres(url, { ...(host === undefined ? {} : { host }), max: 1, onnotice: () => {}, connection: { application_name: 'kassa-warm-up' } })
  let name: string | undefined
  try {
    try {
      result.leftoversDropped = await dropLeftovers(admin, nowMs)
    } catch (error) {
      // The server's own start meets the same database next, and says what is wrong with it.
      result.skipped = `could not reach the database (${(error as Error).message})`
      return result
    }
    name = `${WARM_UP_DATABASE_PREFIX}${nowMs.toString(36)}_${randomBytes(4).toString('hex')}`
    try {
      await admin.unsafe(`create database "${name}"`)
      onCreated?.(name)
    } catch (error) {
      name = undefined
      result.skipped = `could not create a throwaway database (${(error as Error).message})`
      return result
    }
    try {
      await authorizeOnThrowaway(config, createApp, withDatabaseName(config.databaseUrl, name), count, result, signal)
    } catch (error) {
      result.skipped = `the throwaway instance failed after ${result.authorizations} authorizations (${(error as Error).message})`
    }
    if (signal?.aborted && result.skipped === undefined) result.skipped = `stopped after ${result.authorizations} authorizations (${String(signal.reason ?? 'aborted')})`
    return result
  } finally {
    if (name !== undefined) await admin.unsafe(`drop database if exists "${name}" with (force)`).catch(() => {})
    await admin.end({ timeout: 5 }).catch(() => {})
    result.elapsedMs = performance.now() - started
  }
}

async function dropLeftovers(admin: postgres.Sql, nowMs: number): Promise<string[]> {
  const rows = await admin<{ datname: string }[]>`select datname from pg_database where datname like ${`${WARM_UP_DATABASE_PREFIX}%`}`
  const dropped: string[] = []
  for (const { datname } of rows) {
    const createdMs = warmUpDatabaseCreatedMs(datname)
    if (createdMs === undefined || nowMs - createdMs < LEFTOVER_AGE_MS) continue
    // Without FORCE: one still in use (a warm-up that has run for an hour?) is left for later.
    const ok = await admin.unsafe(`drop database if exists "${datname}"`).then(
      () => true,
      () => false,
    )
    if (ok) dropped.push(datname)
  }
  return dropped
}

async function authorizeOnThrowaway(
  config: Config,
  createApp: typeof CreateApp,
  databaseUrl: string,
  count: number,
  result: WarmUpResult,
  signal: AbortSignal | undefined,
): Promise<void> {
  const operatorToken = `op_${randomToken(32)}`
  const kassa = await createApp({
    ...config,
    databaseUrl,
    // The throwaway instance funds its accounts from the sandbox faucet; the authorization path is
    // the same in both environments. Its own operator token: it never reads or writes the data folder.
    serviceEnv: 'sandbox',
    operatorToken,
    webhookDelivery: false,
    webhookDeliveryProcess: false,
    logRequests: false,
    warmUpAuthorizations: 0,
  })
  try {
    const call = async (method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: any }> => {
      const response = await kassa.handle(
        new Request(`http://kassa.warm-up${path}`, {
          method,
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
      )
      return { status: response.status, body: await response.json() }
    }
    const answered = (answer: { status: number; body: any }, status: number, what: string) => {
      if (answer.status !== status) throw new Error(`${what} answered ${answer.status}: ${JSON.stringify(answer.body).slice(0, 200)}`)
      return answer.body
    }
    const org = answered(await call('POST', '/ops/v1/orgs', operatorToken, { name: 'Kassa warm-up' }), 201, 'creating the organization')
    answered(await call('PATCH', `/ops/v1/orgs/${org.id}/limits`, operatorToken, { rateLimitPerMinute: 10_000_000 }), 200, 'raising its rate limit')
    const key = (org.keys as Array<{ type: string; key: string }>).find((entry) => entry.type === 'test')!.key
    const accounts: string[] = []
    for (let i = 0; i < WARM_UP_ACCOUNTS; i++) {
      const account = answered(await call('POST', '/v1/accounts', key, { externalId: `warm-up-${i}` }), 201, 'minting an account')
      answered(await call('POST', `/v1/sandbox/accounts/${account.id}/fund`, key, { asset: 'USDC', amount: '10000000' }), 201, 'funding an account')
      accounts.push(account.id)
    }
    const deadline = performance.now() + WARM_UP_TIME_LIMIT_MS
    for (let i = 0; i < count && performance.now() < deadline && signal?.aborted !== true; i++) {
      const answer = await call('POST', '/v1/payments/authorize', key, {
        accountId: accounts[i % accounts.length],
        asset: 'USDC',
        amount: '1.25',
        merchant: { name: 'Warm-up', mcc: '5814' },
      })
      result.authorizations++
      if (answer.status === 201 && answer.body.state === 'authorized') result.approved++
      // A path that approves nothing warms nothing: stop rather than spend the time.
      if (result.authorizations === 100 && result.approved === 0) throw new Error(`none of the first 100 was approved (the last: ${answer.status} ${JSON.stringify(answer.body).slice(0, 200)})`)
    }
  } finally {
    await kassa.close()
  }
}
