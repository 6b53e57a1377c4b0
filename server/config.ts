import { existsSync } from 'node:fs'
import { resolve } from 'node:path'
import { canonicalBlocklistEntry } from './modules/screening/screening.ts'

export type ServiceEnvironment = 'sandbox' | 'production'
export type RateLimitStoreKind = 'memory' | 'postgres'

export interface Config {
  port: number
  host: string
  /** A postgres:// URL; absent means the embedded PGlite database in `dataDir`. */
  databaseUrl: string | undefined
  dataDir: string
  serviceEnv: ServiceEnvironment
  /** Absent in sandbox means: generate one on first start and keep it in the data folder. */
  operatorToken: string | undefined
  rateLimitStore: RateLimitStoreKind
  bodyLimitBytes: number
  /** Test-only: lets webhook endpoints point at loopback receivers. Production refuses it. */
  allowLoopbackWebhooks: boolean
  /**
   * Test-only: a PEM file of an extra certificate authority trusted for webhook deliveries (the
   * tests' self-signed receivers). Production refuses it; real receivers use public CAs.
   */
  webhookCaFile: string | undefined
  /** Whether this instance runs the webhook delivery worker (several instances may share the work). */
  webhookDelivery: boolean
  /**
   * Whether a listening server runs its delivery worker in a child process of its own, at the lowest
   * priority unless `webhookDeliveryNice` says otherwise, rather than on its request thread
   * (`server/delivery.ts`); Postgres only.
   */
  webhookDeliveryProcess: boolean
  /**
   * The delivery process's niceness (`WEBHOOK_DELIVERY_NICE`, 0 to 19, default 19): 19 gives it
   * about 1.5% of a core that the server or Postgres want, so that deliveries lag under sustained
   * saturation instead of the authorizations; lower trades authorization latency for delivery.
   */
  webhookDeliveryNice: number
  /** Group commit on the ledger writer; off means one database transaction per operation. */
  groupCommit: boolean
  /**
   * Ledger batches in flight at once on Postgres (see `WriterOptions.pipelineDepth`). 2 by default:
   * Postgres starts the next batch while the server's one thread is still busy with requests, which
   * on a 2-core host raised the closed-loop throughput by about a tenth; a database across a network
   * may gain from 3. Tests run with 2 so the pipelined path is exercised.
   */
  ledgerPipelineDepth: number
  /**
   * Operations a batch must carry to be sent while another is in flight (see
   * `WriterOptions.pipelineMinOperations`). 32 by default: without it, pipelined batches shrank to a
   * dozen operations and cost more than they saved. Tests use 1, so that two small batches in flight
   * can be arranged.
   */
  ledgerPipelineMinOperations: number
  /**
   * Load shedding of authorizations (`LOAD_SHEDDING`, on by default; only on a Postgres server,
   * see `LoadShedder`): while the server's thread runs late tick after tick, a share of the
   * authorizations is refused 429 `rate_limited` before their body is read. Off in tests unless a
   * test turns it on.
   */
  loadShedding: boolean
  /**
   * The request thread first (`REQUEST_THREAD_FIRST`, on by default; Linux): the server process's
   * other threads (the engine's compilers, collector helpers, the allocator's scavenger) at the
   * lowest priority and a short scheduler slice for the main thread, which serves every request
   * (`server/platform/thread-priority.ts`). Applied by `server/main.ts` only, never to a test's
   * own process.
   */
  requestThreadFirst: boolean
  /**
   * Authorizations slower than this (milliseconds from arrival to answer; `SLOW_AUTHORIZATION_MS`,
   * default 3, the contract's p99 at 1000/s) are kept, the newest `slowAuthorizationsKept`, with
   * where their time went, for `GET /ops/v1/payments/slow`. 0 keeps every one.
   */
  slowAuthorizationMs: number
  /**
   * How many slow authorizations the log keeps, the newest (`SLOW_AUTHORIZATIONS_KEPT`, default
   * 4,096). A benchmark past capacity keeps more, so the whole of a run is in it.
   */
  slowAuthorizationsKept: number
  /** Largest number of connections the postgres.js pool opens. */
  databasePoolMax: number
  /**
   * Authorizations a Postgres server makes, one at a time, on a throwaway database of its own before
   * it listens (`WARM_UP_AUTHORIZATIONS`, default 8,000 on Postgres, 4.6 to 13.1 s where measured; 0
   * turns it off; the embedded database has none), so that its first partners' requests do not
   * meet a cold process (`server/platform/warm-up.ts`). Off in tests unless a test turns it on.
   */
  warmUpAuthorizations: number
  logRequests: boolean
  /** Blocked withdrawal destinations (`SCREENING_BLOCKLIST`, comma-separated), in canonical form. */
  screeningBlocklist: string[]
  /**
   * Key material deposit addresses (and the sending wallet) are derived from (`DEPOSIT_KEY_SEED`,
   * hex, at least 32 bytes). Sandbox falls back to the public development seed; production requires its own.
   */
  depositKeySeedHex: string
  /**
   * Where earning (vaults) runs: `sandbox`, the venue simulator (sandbox only), or `off`. Production
   * has no venue adapter yet, so it runs with earning off; asking for the sandbox venue there stops
   * the start.
   */
  vaultVenue: 'sandbox' | 'off'
  /** How often the earning worker syncs vault prices and runs cycle cadences; 0 turns it off. */
  earningWorkerIntervalMs: number
  /** Test-only: the process exits at this point of a cycle settlement (crash tests). */
  crashPoint: string | undefined
}

/**
 * The development seed of sandbox deposit addresses. It is public (it is in this file), so the
 * addresses derived from it must never receive real funds; production refuses to start with it.
 */
export const SANDBOX_DEPOSIT_KEY_SEED_HEX = '6b617373612073616e64626f78206465706f736974207365656420763120ffff'

/** The delivery process's niceness unless `WEBHOOK_DELIVERY_NICE` says otherwise: the lowest priority. */
export const DELIVERY_PROCESS_NICE_DEFAULT = 19

/** Authorizations of a Postgres server's warm-up unless `WARM_UP_AUTHORIZATIONS` says otherwise. */
export const WARM_UP_AUTHORIZATIONS_DEFAULT = 8000

/** How many slow authorizations the log keeps unless `SLOW_AUTHORIZATIONS_KEPT` says otherwise. */
export const SLOW_AUTHORIZATIONS_KEPT_DEFAULT = 4096

/**
 * Environment the server's process is started with, which no setting read after start can change.
 *
 * Bun's own idle garbage-collection timer off (`BUN_GC_TIMER_DISABLE=1`). That timer asks the
 * engine for a collection about once a second while the heap grows, on top of the engine's own
 * collections paced by allocation, so a process that stops allocating still returns memory. Under
 * a steady stream of authorizations each of those collections pauses the one thread at a moment
 * unrelated to the load, and the few requests and the commit reply it holds up are late together.
 * The cost: an idle server keeps its garbage until the engine's own timers collect it.
 *
 * The engine's heap warm-up thread off (`BUN_JSC_useWarmUpMarkedBlocks=false`). Once a process has
 * asked for 64 blocks of garbage-collected heap, JavaScriptCore starts a thread (`JSCWarmUp`) that
 * makes blocks resident ahead of the allocator, so the thread that allocates does not fault on
 * them. Kassa's allocation never stops under load, and that thread took 300 to 380 ms of CPU in
 * every 4 s of authorizations in process, on two cores the server shares with Postgres and the
 * load generator: with it off the process spent 64 to 67 µs per authorization against 76 to 81,
 * the main thread no more. The cost: the main thread takes the blocks' page faults itself (over
 * HTTP it took fewer per answer, not more).
 *
 * The measurements are in docs/authorization.md ("The runtime's own settings"). `npm start` and
 * the benchmark set both; `server/main.ts` says at start whether each is set.
 */
export const SERVER_PROCESS_ENV: Readonly<Record<string, string>> = { BUN_GC_TIMER_DISABLE: '1', BUN_JSC_useWarmUpMarkedBlocks: 'false' }

/** What `server/main.ts` prints of Bun's idle collection timer, read from the process' environment. */
export function gcTimerSummary(env: Environment = process.env): string {
  const value = env.BUN_GC_TIMER_DISABLE
  // As Bun reads it (tried on Bun 1.4.5): empty, "0", "false", "no" and "off", in any case, leave the timer on; any other value turns it off.
  const off = value !== undefined && !['', '0', 'false', 'no', 'off'].includes(value.toLowerCase())
  return off ? `off (BUN_GC_TIMER_DISABLE=${value})` : 'on (start with BUN_GC_TIMER_DISABLE=1, as npm start does)'
}

/** What `server/main.ts` prints of the engine's heap warm-up thread, read from the process' environment. */
export function heapWarmUpSummary(env: Environment = process.env): string {
  const value = env.BUN_JSC_useWarmUpMarkedBlocks
  // As JavaScriptCore reads a boolean option (tried on Bun 1.4.5): "false", "no" and "0", in any
  // case, turn it off; "true", "yes" and "1" leave it on; anything else stops Bun before it starts.
  const off = value !== undefined && ['false', 'no', '0'].includes(value.toLowerCase())
  return off ? `off (BUN_JSC_useWarmUpMarkedBlocks=${value})` : 'on (start with BUN_JSC_useWarmUpMarkedBlocks=false, as npm start does)'
}

export class ConfigError extends Error {
  override name = 'ConfigError'
}

type Environment = Record<string, string | undefined>

function readInteger(env: Environment, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`)
  const value = Number(raw)
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`)
  return value
}

function readBoolean(env: Environment, name: string, fallback: boolean): boolean {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (['1', 'true', 'on', 'yes'].includes(raw)) return true
  if (['0', 'false', 'off', 'no'].includes(raw)) return false
  throw new ConfigError(`${name} must be true or false, got "${raw}"`)
}

function readChoice<T extends string>(env: Environment, name: string, choices: readonly T[], fallback: T): T {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!(choices as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${choices.join(', ')}, got "${raw}"`)
  }
  return raw as T
}

function readDatabaseUrl(env: Environment): string | undefined {
  const raw = env.DATABASE_URL
  if (raw === undefined || raw === '') return undefined
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ConfigError('DATABASE_URL must be a postgres:// URL')
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new ConfigError(`DATABASE_URL must use postgres:// or postgresql://, got ${url.protocol}//`)
  }
  return raw
}

function readBlocklist(env: Environment): string[] {
  const raw = env.SCREENING_BLOCKLIST
  if (raw === undefined || raw.trim() === '') return []
  return raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '')
    .map((entry) => {
      try {
        return canonicalBlocklistEntry(entry)
      } catch (error) {
        throw new ConfigError(`SCREENING_BLOCKLIST: ${(error as Error).message}`)
      }
    })
}

function readDepositKeySeed(env: Environment): string {
  const raw = env.DEPOSIT_KEY_SEED
  if (raw === undefined || raw === '') return SANDBOX_DEPOSIT_KEY_SEED_HEX
  if (!/^(?:[0-9a-fA-F]{2}){32,128}$/.test(raw)) throw new ConfigError('DEPOSIT_KEY_SEED must be 32 to 128 bytes of hex (64 to 256 hex digits)')
  return raw.toLowerCase()
}

function readCaFile(env: Environment): string | undefined {
  const raw = env.WEBHOOK_CA_FILE
  if (raw === undefined || raw === '') return undefined
  const path = resolve(raw)
  if (!existsSync(path)) throw new ConfigError(`WEBHOOK_CA_FILE must name a readable PEM file, got "${raw}"`)
  return path
}

/**
 * The delivery worker in a process of its own: the default on Postgres. The embedded database lives
 * in this process alone, so there a worker can only run in it.
 */
function readDeliveryProcess(env: Environment, databaseUrl: string | undefined): boolean {
  const process = readBoolean(env, 'WEBHOOK_DELIVERY_PROCESS', databaseUrl !== undefined)
  if (process && databaseUrl === undefined) {
    throw new ConfigError('WEBHOOK_DELIVERY_PROCESS=true needs DATABASE_URL (the embedded database is open in one process only)')
  }
  return process
}

/**
 * Reads and validates the whole configuration at once, so a bad value stops the start with one
 * clear message instead of surfacing as a strange failure later.
 */
export function loadConfig(env: Environment = process.env): Config {
  const serviceEnv = readChoice(env, 'SERVICE_ENV', ['sandbox', 'production'] as const, 'sandbox')
  const databaseUrl = readDatabaseUrl(env)
  const operatorToken = env.OPERATOR_TOKEN === '' ? undefined : env.OPERATOR_TOKEN
  if (operatorToken !== undefined && operatorToken.length < 32) {
    throw new ConfigError('OPERATOR_TOKEN must be at least 32 characters')
  }
  // Operators send the token as `Authorization: Bearer <token>`, which carries no spaces or
  // control characters: such a token would start the server and then never authenticate anyone.
  if (operatorToken !== undefined && !/^[\x21-\x7e]+$/.test(operatorToken)) {
    throw new ConfigError('OPERATOR_TOKEN must be printable ASCII without spaces (it is sent as a Bearer token)')
  }
  const config: Config = {
    port: readInteger(env, 'PORT', 3000, 0, 65535),
    host: env.HOST && env.HOST !== '' ? env.HOST : '0.0.0.0',
    databaseUrl,
    dataDir: resolve(env.DATA_DIR && env.DATA_DIR !== '' ? env.DATA_DIR : '.data'),
    serviceEnv,
    operatorToken,
    rateLimitStore: readChoice(env, 'RATE_LIMIT_STORE', ['memory', 'postgres'] as const, databaseUrl ? 'postgres' : 'memory'),
    bodyLimitBytes: readInteger(env, 'BODY_LIMIT_BYTES', 256 * 1024, 1024, 16 * 1024 * 1024),
    allowLoopbackWebhooks: readBoolean(env, 'ALLOW_LOOPBACK_WEBHOOKS', false),
    webhookCaFile: readCaFile(env),
    webhookDelivery: readBoolean(env, 'WEBHOOK_DELIVERY', true),
    webhookDeliveryProcess: readDeliveryProcess(env, databaseUrl),
    webhookDeliveryNice: readInteger(env, 'WEBHOOK_DELIVERY_NICE', DELIVERY_PROCESS_NICE_DEFAULT, 0, 19),
    groupCommit: readBoolean(env, 'GROUP_COMMIT', true),
    ledgerPipelineDepth: readInteger(env, 'LEDGER_PIPELINE_DEPTH', 2, 1, 16),
    ledgerPipelineMinOperations: readInteger(env, 'LEDGER_PIPELINE_MIN_OPERATIONS', 32, 1, 256),
    loadShedding: readBoolean(env, 'LOAD_SHEDDING', true),
    requestThreadFirst: readBoolean(env, 'REQUEST_THREAD_FIRST', true),
    slowAuthorizationMs: readInteger(env, 'SLOW_AUTHORIZATION_MS', 3, 0, 500),
    slowAuthorizationsKept: readInteger(env, 'SLOW_AUTHORIZATIONS_KEPT', SLOW_AUTHORIZATIONS_KEPT_DEFAULT, 1, 1_000_000),
    databasePoolMax: readInteger(env, 'DATABASE_POOL_MAX', 10, 1, 200),
    warmUpAuthorizations: readInteger(env, 'WARM_UP_AUTHORIZATIONS', databaseUrl ? WARM_UP_AUTHORIZATIONS_DEFAULT : 0, 0, 100_000),
    logRequests: readBoolean(env, 'LOG_REQUESTS', false),
    screeningBlocklist: readBlocklist(env),
    depositKeySeedHex: readDepositKeySeed(env),
    vaultVenue: readChoice(env, 'VAULT_VENUE', ['sandbox', 'off'] as const, serviceEnv === 'sandbox' ? 'sandbox' : 'off'),
    earningWorkerIntervalMs: readInteger(env, 'EARNING_WORKER_INTERVAL_MS', 60_000, 0, 86_400_000),
    crashPoint: env.KASSA_TEST_CRASH_POINT === undefined || env.KASSA_TEST_CRASH_POINT === '' ? undefined : env.KASSA_TEST_CRASH_POINT,
  }
  if (config.warmUpAuthorizations > 0 && databaseUrl === undefined) {
    throw new ConfigError('WARM_UP_AUTHORIZATIONS needs DATABASE_URL (the warm-up runs on a throwaway Postgres database; the embedded database has none)')
  }
  assertProductionSafe(config)
  return config
}

/** A process's start (`server/main.ts`, `server/delivery.ts`): the configuration, or exit 2 saying what is wrong. */
export function loadConfigOrExit(processName: string): Config {
  try {
    return loadConfig()
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(`${processName}: configuration error: ${error.message}`)
      process.exit(2)
    }
    throw error
  }
}

/** Production refuses every setting that exists only to make development and testing easy. */
export function assertProductionSafe(config: Config): void {
  if (config.serviceEnv !== 'production') return
  const problems: string[] = []
  if (config.databaseUrl === undefined) problems.push('DATABASE_URL is required (the embedded database is for development)')
  if (config.operatorToken === undefined) problems.push('OPERATOR_TOKEN is required (it is generated only in sandbox)')
  if (config.allowLoopbackWebhooks) problems.push('ALLOW_LOOPBACK_WEBHOOKS is a test-only setting')
  if (config.depositKeySeedHex === SANDBOX_DEPOSIT_KEY_SEED_HEX) problems.push('DEPOSIT_KEY_SEED is required (the sandbox seed is public)')
  if (config.vaultVenue === 'sandbox') problems.push('VAULT_VENUE=sandbox is the venue simulator; production earning needs a venue adapter, which this build does not have (leave VAULT_VENUE unset or off)')
  if (config.crashPoint !== undefined) problems.push('KASSA_TEST_CRASH_POINT is a test-only setting')
  if (config.webhookCaFile !== undefined) problems.push('WEBHOOK_CA_FILE is a test-only setting (receivers must use publicly trusted certificates)')
  if (problems.length > 0) {
    throw new ConfigError(`production refuses to start: ${problems.join('; ')}`)
  }
}

export function configForTests(overrides: Partial<Config> = {}): Config {
  return {
    port: 0,
    host: '127.0.0.1',
    databaseUrl: undefined,
    dataDir: resolve('.data/test'),
    serviceEnv: 'sandbox',
    operatorToken: 'test-operator-token-0123456789abcdef0123456789',
    rateLimitStore: 'memory',
    bodyLimitBytes: 256 * 1024,
    allowLoopbackWebhooks: true,
    webhookCaFile: undefined,
    webhookDelivery: true,
    webhookDeliveryProcess: false,
    webhookDeliveryNice: DELIVERY_PROCESS_NICE_DEFAULT,
    groupCommit: true,
    ledgerPipelineDepth: 2,
    ledgerPipelineMinOperations: 1,
    loadShedding: false,
    requestThreadFirst: false,
    slowAuthorizationMs: 3,
    slowAuthorizationsKept: SLOW_AUTHORIZATIONS_KEPT_DEFAULT,
    databasePoolMax: 10,
    warmUpAuthorizations: 0,
    logRequests: false,
    screeningBlocklist: [],
    depositKeySeedHex: SANDBOX_DEPOSIT_KEY_SEED_HEX,
    vaultVenue: overrides.serviceEnv === 'production' ? 'off' : 'sandbox',
    earningWorkerIntervalMs: 0,
    crashPoint: undefined,
    ...overrides,
  }
}
