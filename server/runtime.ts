import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from './config.ts'
import { openDatabase, runMigrations, type Database, type DatabaseHandle } from '../db/client.ts'
import { openLedger, type Ledger } from './ledger/ledger.ts'
import { accountRows } from './modules/accounts/ledger-rows.ts'
import { depositWriteSets } from './modules/deposits/write-sets.ts'
import { eventWriteSets } from './modules/events/write-sets.ts'
import { holdWriteSets, pendingHoldsToLoad } from './modules/holds/write-sets.ts'
import { paymentWriteSets } from './modules/payments/write-sets.ts'
import { transferWriteSets } from './modules/transfers/write-sets.ts'
import { randomToken } from './lib/hash.ts'
import type { MonotonicClock } from './lib/monotonic-clock.ts'
import { hexToBytes } from '@noble/hashes/utils.js'
import type { ChainAdapter } from './modules/chain/adapter.ts'
import { AddressDeriver } from './modules/chain/derivation.ts'
import { SandboxChain, UnconfiguredChain } from './modules/chain/simulator.ts'
import { Clock } from './modules/clock/clock.ts'
import { KeyCache } from './platform/key-cache.ts'
import { BlocklistRule, Screening, type ScreeningRule } from './modules/screening/screening.ts'
import { loadKeyCache, readKeyByHash, refreshCachedKey, refreshCachedOrg } from './modules/orgs/repo.ts'
import { LoadShedder } from './platform/load-shedder.ts'
import { LoopLag } from './platform/loop-lag.ts'
import { PostgresRateLimiter } from './platform/rate-limit-postgres.ts'
import { FailOpenRateLimiter, MemoryRateLimiter, type RateLimiter } from './platform/rate-limit-store.ts'
import { CHANGE_CHANNEL, type ChangeNotice } from './platform/changes.ts'
import { openCluster, type ClusterNode } from './cluster/index.ts'


/** Everything a request needs, built once per process and passed to each module explicitly. */
export interface Runtime {
  config: Config
  database: DatabaseHandle
  /** How late the event loop runs (see `LoopLag`). */
  loopLag: LoopLag
  /**
   * Sheds authorizations while the loop runs late tick after tick (see `LoadShedder`); undefined
   * when off: by configuration, and on the embedded database, whose queries run on this same
   * thread, so that a late loop there says nothing of the requests waiting.
   */
  shedder: LoadShedder | undefined
  db: Database
  clock: Clock
  keys: KeyCache
  rateLimiter: RateLimiter
  operatorToken: string
  /** Hot balances and the group-commit writer: the one place money moves. */
  ledger: Ledger
  /** Derives deposit addresses and the sending wallet from DEPOSIT_KEY_SEED. */
  addresses: AddressDeriver
  /** Observes arrivals and sends withdrawals: the sandbox chain simulator (state in Postgres) in sandbox; in production, an adapter that builds but never sends until a real one is configured. */
  chain: ChainAdapter
  /** Screening of withdrawal destinations (allowlist registration and withdrawal creation). */
  screening: Screening
  /**
   * Cluster mode's membership (`KASSA_CLUSTER=1`): which organizations this server owns, the gate
   * that forwards the others' requests, the ledger's admission check; undefined outside a cluster.
   */
  cluster: ClusterNode | undefined
  /** Background loops (expiry sweeps, purges) register their stop functions here. */
  stoppers: Array<() => Promise<void> | void>
}

/**
 * What the delivery process (`server/delivery.ts`) runs on: its database, the organizations' clocks,
 * the settings and its stops. Its worker takes these as `createWebhookDelivery`'s dependencies.
 */
export type DeliveryRuntime = Pick<Runtime, 'config' | 'database' | 'db' | 'clock' | 'stoppers'>

export interface RuntimeOptions {
  /** A database already opened by the caller (tests); otherwise opened from the config. */
  database?: DatabaseHandle
  wallClockMs?: () => number
  /** The ledger writer's monotonic clock and timers (tests of its own timing move one by hand). */
  writerClock?: MonotonicClock
  /** Screening rules run after the configured blocklist (a partner's API; tests plug in their own). */
  screeningRules?: ScreeningRule[]
}

export async function createRuntime(config: Config, options: RuntimeOptions = {}): Promise<Runtime> {
  const database =
    options.database ??
    (await openDatabase({
      databaseUrl: config.databaseUrl,
      embeddedPath: join(config.dataDir, 'pglite'),
      poolMax: config.databasePoolMax,
    }))
  await runMigrations(database, config.databaseUrl)
  const db = database.db
  const changes = await listenForChanges(database)
  const clock = new Clock(db, options.wallClockMs)
  await clock.load()
  // A key missing from memory (issued on another instance a moment ago) is read on its first use.
  const keys = new KeyCache(config.serviceEnv, (keyHash) => readKeyByHash(db, keyHash))
  await loadKeyCache(db, keys)
  const shedder = config.loadShedding && database.kind === 'postgres' ? new LoadShedder() : undefined
  const loopLag = new LoopLag(shedder ? (lagMs, busyShare) => shedder.observe(lagMs, busyShare) : undefined)
  loopLag.start()
  const cluster = config.cluster !== undefined && config.databaseUrl !== undefined ? await openCluster(config.cluster, config.databaseUrl) : undefined
  const ledger = await openLedger(db, {
    // Cluster mode: an operation for an organization this server does not own is refused before it
    // is reserved, and a commit lands only while this server still holds the organization's lease.
    admit: cluster?.admit,
    fence: cluster?.fence,
    groupCommit: config.groupCommit,
    accounts: accountRows,
    writerDb: database.writer,
    // PGlite runs in process: nothing to overlap.
    pipelineDepth: database.kind === 'postgres' ? config.ledgerPipelineDepth : 1,
    pipelineMinOperations: config.ledgerPipelineMinOperations,
    pendingHolds: pendingHoldsToLoad,
    writerClock: options.writerClock,
  })
  // The tables each module commits with its money (the ledger knows none of them).
  ledger.registerWriteSets(holdWriteSets)
  ledger.registerWriteSets(transferWriteSets)
  ledger.registerWriteSets(paymentWriteSets)
  ledger.registerWriteSets(depositWriteSets)
  ledger.registerWriteSets(eventWriteSets)
  const addresses = new AddressDeriver(hexToBytes(config.depositKeySeedHex))
  const runtime: Runtime = {
    config,
    database,
    db,
    clock,
    keys,
    rateLimiter: config.rateLimitStore === 'postgres' ? new FailOpenRateLimiter(new PostgresRateLimiter(db)) : new MemoryRateLimiter(),
    loopLag,
    shedder,
    operatorToken: resolveOperatorToken(config),
    ledger,
    addresses,
    // The simulator is a sandbox tool: production never pretends to broadcast.
    chain: config.serviceEnv === 'sandbox' ? new SandboxChain(db, clock, addresses, cluster?.ownedOrganizations) : new UnconfiguredChain(addresses),
    screening: new Screening([new BlocklistRule(config.screeningBlocklist), ...(options.screeningRules ?? [])]),
    cluster,
    // Operations already reserved in memory are written before the database closes.
    stoppers: [() => ledger.drain(), () => loopLag.stop()],
  }
  changes.applyTo(runtime)
  return runtime
}

/** What a change notice updates: clocks always, keys and organizations where a key cache is kept. */
type ChangeTarget = Pick<Runtime, 'db' | 'clock'> & { keys?: KeyCache }

/**
 * Listens for other instances' change notices before the caches they keep current are loaded: a
 * change committed after a load read its rows and before the LISTEN began would never reach this
 * process (a sandbox clock advanced while a delivery process started stayed behind in it for
 * good). Notices that arrive while the caches load wait, and are applied once `applyTo` is given
 * the loaded runtime; each re-reads its row, so whatever the loads saw, nothing committed after
 * the LISTEN is missed.
 */
async function listenForChanges(database: DatabaseHandle): Promise<{ applyTo(runtime: ChangeTarget): void }> {
  const waiting: string[] = []
  let target: ChangeTarget | undefined
  await database.listen(CHANGE_CHANNEL, (payload) => {
    if (target === undefined) waiting.push(payload)
    else void applyChangeNotice(target, payload)
  })
  return {
    applyTo(runtime) {
      target = runtime
      for (const payload of waiting.splice(0)) void applyChangeNotice(runtime, payload)
    },
  }
}

/** Takes another instance's change into this process's caches; one without a key cache (the delivery process) keeps clocks only. */
async function applyChangeNotice(runtime: ChangeTarget, payload: string): Promise<void> {
  let notice: ChangeNotice
  try {
    notice = JSON.parse(payload) as ChangeNotice
  } catch {
    return
  }
  try {
    if (notice.kind === 'clock') await runtime.clock.refresh(notice.id)
    else if (runtime.keys === undefined) return
    else if (notice.kind === 'key') await refreshCachedKey(runtime.db, runtime.keys, notice.id)
    else if (notice.kind === 'org') await refreshCachedOrg(runtime.db, runtime.keys, notice.id)
  } catch (error) {
    console.error('failed to apply change notice', notice, error)
  }
}

/**
 * In sandbox without OPERATOR_TOKEN, a token is generated on first start, printed once and kept
 * in the data folder (mode 0600) so restarts keep it. Production requires the variable.
 */
function resolveOperatorToken(config: Config): string {
  if (config.operatorToken !== undefined) return config.operatorToken
  const path = join(config.dataDir, 'operator-token')
  if (existsSync(path)) return readFileSync(path, 'utf8').trim()
  mkdirSync(config.dataDir, { recursive: true })
  const token = `op_${randomToken(32)}`
  writeFileSync(path, `${token}\n`, { mode: 0o600 })
  console.log(`Generated an operator token (shown once, kept in ${path}):\n  ${token}`)
  return token
}

/**
 * What the delivery process runs on (`server/delivery.ts`): the database, the organizations'
 * clocks (kept current by other instances' notices, as in a server) and the settings; no ledger,
 * no caches of keys, nothing that serves a request. The server that started it has already
 * migrated the database.
 */
export async function createDeliveryRuntime(config: Config): Promise<DeliveryRuntime> {
  const database = await openDatabase({
    databaseUrl: config.databaseUrl,
    embeddedPath: join(config.dataDir, 'pglite'),
    poolMax: DELIVERY_POOL_MAX,
    pool: { applicationName: 'kassa-delivery', settings: DELIVERY_SESSION },
  })
  const changes = await listenForChanges(database)
  const clock = new Clock(database.db)
  await clock.load()
  const runtime: DeliveryRuntime = { config, database, db: database.db, clock, stoppers: [] }
  changes.applyTo(runtime)
  return runtime
}

/** The delivery process's connections: its passes run one at a time, outcomes written in batches. */
const DELIVERY_POOL_MAX = 4

/**
 * The delivery process commits without waiting for its commits to reach the disk. Everything it
 * writes is delivery bookkeeping under at-least-once (the cursor and the delivery rows it fans out,
 * in one transaction; claims; outcomes), and Postgres loses at most its last few hundred
 * milliseconds of such commits in a crash of the database, never a part of one: the cursor goes
 * back with the rows it wrote (fanned out again), a claim's lease is gone (attempted again), an
 * outcome is gone (attempted again, which receivers already take, deduplicating on the event id).
 * Its flushes no longer queue with the authorizations' at the disk (docs/architecture.md, "Background work"). Nothing of money is written by this process.
 */
const DELIVERY_SESSION = { synchronous_commit: 'off' }

export async function closeRuntime(runtime: Pick<Runtime, 'database' | 'stoppers'>): Promise<void> {
  for (const stop of runtime.stoppers.splice(0)) await stop()
  await runtime.database.close()
}
