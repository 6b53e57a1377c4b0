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
   * meet a cold process (`server/warm-up.ts`). Off in tests unless a test turns it on.
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
   * Tests only (sandbox): the process exits, without answering, right after the Nth money-moving
   * request with an Idempotency-Key committed (KASSA_TEST_EXIT_AFTER_COMMIT=N); 0 is off.
   */
  testExitAfterCommit: number
  /**
   * How long after a business date's cut-off its statements are sealed (`STATEMENT_SETTLE_SECONDS`,
   * default 60), so that movements booked just before the cut-off have committed.
   */
  statementSettleSeconds: number
  /** How often the statement sealer looks for dates to seal (`STATEMENT_SEAL_INTERVAL_SECONDS`, default 60; 0: never by itself). */
  statementSealIntervalSeconds: number
  /** The SBT data API's own listener (`SBT_PORT`; by default PORT + 1, 3001, or any free port when PORT is 0). */
  sbtPort: number
  /** The base of the SBT referral links (`SBT_REFERRAL_BASE_URL`): the frontend's address. */
  sbtReferralBaseUrl: string
  /** How long an issuer's Verify API (labelType 40) may take to answer (`SBT_VERIFY_TIMEOUT_MS`, default 5,000). */
  sbtVerifyTimeoutMs: number
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
  /**
   * Cluster mode (`KASSA_CLUSTER=1`, Postgres only): several servers on one database, each
   * organization owned by one of them at a time (docs/scale-out.md, "Cluster mode"); undefined
   * when off, the default, where one server serves a database alone.
   */
  cluster: ClusterConfig | undefined
}

export interface ClusterConfig {
  /** This server's name among its peers (`KASSA_INSTANCE_ID`; by default made up at start, unique). */
  instanceId: string | undefined
  /** Shared by every server of the cluster (`KASSA_CLUSTER_SECRET`, at least 32 characters): forwarded requests carry it. */
  secret: string
  /** The internal listener's port (`KASSA_INTERNAL_PORT`; 0, the default: any free port, announced to the peers). */
  internalPort: number
  /** The address the peers reach the internal listener at (`KASSA_INTERNAL_HOST`; by default HOST, or this host's name when HOST listens everywhere). */
  internalHost: string | undefined
  /** How long a partition's lease lasts without renewal (`KASSA_LEASE_TTL_MS`, default 5,000). */
  leaseTtlMs: number
  /** How often a server renews its leases and looks for partitions to take or give back (`KASSA_HEARTBEAT_MS`, default 1,000). */
  heartbeatMs: number
}

/** A partition's lease unless `KASSA_LEASE_TTL_MS` says otherwise: an owner that dies is replaced within this time and a heartbeat. */
export const LEASE_TTL_MS_DEFAULT = 5000
/** How often leases are renewed unless `KASSA_HEARTBEAT_MS` says otherwise. */
export const HEARTBEAT_MS_DEFAULT = 1000

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

function readHttpUrl(env: Environment, name: string, fallback: string): string {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new ConfigError(`${name} must be an http:// or https:// URL, got "${raw}"`)
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.search !== '' || url.hash !== '') {
    throw new ConfigError(`${name} must be an http:// or https:// URL without query or fragment, got "${raw}"`)
  }
  return raw.replace(/\/+$/, '')
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
 * Cluster mode's settings, or undefined when it is off. It needs Postgres: the embedded database
 * is open in one process only, so there is nothing for a second server to share.
 */
function readCluster(env: Environment, databaseUrl: string | undefined): ClusterConfig | undefined {
  if (!readBoolean(env, 'KASSA_CLUSTER', false)) return undefined
  if (databaseUrl === undefined) {
    throw new ConfigError('KASSA_CLUSTER=1 needs DATABASE_URL: cluster mode shares one Postgres database between servers, and the embedded database is open in one process only')
  }
  const secret = env.KASSA_CLUSTER_SECRET ?? ''
  if (secret.length < 32) throw new ConfigError('KASSA_CLUSTER=1 needs KASSA_CLUSTER_SECRET, at least 32 characters, the same on every server of the cluster')
  const instanceId = env.KASSA_INSTANCE_ID === undefined || env.KASSA_INSTANCE_ID === '' ? undefined : env.KASSA_INSTANCE_ID
  if (instanceId !== undefined && !/^[A-Za-z0-9._:-]{1,64}$/.test(instanceId)) {
    throw new ConfigError(`KASSA_INSTANCE_ID must be 1 to 64 letters, digits, dots, dashes, colons or underscores, got "${instanceId}"`)
  }
  const leaseTtlMs = readInteger(env, 'KASSA_LEASE_TTL_MS', LEASE_TTL_MS_DEFAULT, 300, 600_000)
  const heartbeatMs = readInteger(env, 'KASSA_HEARTBEAT_MS', HEARTBEAT_MS_DEFAULT, 50, 60_000)
  // A lease must survive a missed heartbeat or two: renewing less than three times per lease would
  // let one slow round trip hand the partition to a peer.
  if (heartbeatMs * 3 > leaseTtlMs) throw new ConfigError(`KASSA_HEARTBEAT_MS (${heartbeatMs}) must be at most a third of KASSA_LEASE_TTL_MS (${leaseTtlMs})`)
  const internalHost = env.KASSA_INTERNAL_HOST === undefined || env.KASSA_INTERNAL_HOST === '' ? undefined : env.KASSA_INTERNAL_HOST
  return { instanceId, secret, internalPort: readInteger(env, 'KASSA_INTERNAL_PORT', 0, 0, 65535), internalHost, leaseTtlMs, heartbeatMs }
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
  const port = readInteger(env, 'PORT', 3000, 0, 65535)
  const cluster = readCluster(env, databaseUrl)
  const vaultVenue = readChoice(env, 'VAULT_VENUE', ['sandbox', 'off'] as const, serviceEnv === 'sandbox' ? 'sandbox' : 'off')
  const config: Config = {
    port,
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
    slowAuthorizationMs: readInteger(env, 'SLOW_AUTHORIZATION_MS', 3, 0, 500),
    slowAuthorizationsKept: readInteger(env, 'SLOW_AUTHORIZATIONS_KEPT', SLOW_AUTHORIZATIONS_KEPT_DEFAULT, 1, 1_000_000),
    databasePoolMax: readInteger(env, 'DATABASE_POOL_MAX', 10, 1, 200),
    warmUpAuthorizations: readInteger(env, 'WARM_UP_AUTHORIZATIONS', databaseUrl ? WARM_UP_AUTHORIZATIONS_DEFAULT : 0, 0, 100_000),
    logRequests: readBoolean(env, 'LOG_REQUESTS', false),
    screeningBlocklist: readBlocklist(env),
    depositKeySeedHex: readDepositKeySeed(env),
    testExitAfterCommit: readInteger(env, 'KASSA_TEST_EXIT_AFTER_COMMIT', 0, 0, 1_000_000),
    statementSettleSeconds: readInteger(env, 'STATEMENT_SETTLE_SECONDS', 60, 0, 3600),
    statementSealIntervalSeconds: readInteger(env, 'STATEMENT_SEAL_INTERVAL_SECONDS', 60, 0, 86_400),
    // Beside the main port by default; a server on any free port (PORT=0) takes any free one here too.
    sbtPort: readInteger(env, 'SBT_PORT', port === 0 ? 0 : port === 65535 ? 65534 : port + 1, 0, 65535),
    sbtReferralBaseUrl: readHttpUrl(env, 'SBT_REFERRAL_BASE_URL', 'http://localhost:3001'),
    sbtVerifyTimeoutMs: readInteger(env, 'SBT_VERIFY_TIMEOUT_MS', 5000, 100, 60_000),
    vaultVenue,
    earningWorkerIntervalMs: readInteger(env, 'EARNING_WORKER_INTERVAL_MS', 60_000, 0, 86_400_000),
    crashPoint: env.KASSA_TEST_CRASH_POINT === undefined || env.KASSA_TEST_CRASH_POINT === '' ? undefined : env.KASSA_TEST_CRASH_POINT,
    cluster,
  }
  if (config.testExitAfterCommit > 0 && serviceEnv !== 'sandbox') {
    throw new ConfigError('KASSA_TEST_EXIT_AFTER_COMMIT is a test switch: it is honoured only with SERVICE_ENV=sandbox')
  }
  if (config.sbtPort !== 0 && config.sbtPort === config.port) throw new ConfigError(`SBT_PORT must differ from PORT (both ${config.port})`)
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
