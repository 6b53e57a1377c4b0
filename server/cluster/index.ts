import { hostname } from 'node:os'
import postgres from 'postgres'
import { socketOf, type Database } from '../../db/client.ts'
import { eq, sql as sqlText } from 'drizzle-orm'
import { accounts, organizations, withdrawals } from '../../db/schema/index.ts'
import type { ClusterConfig } from '../config.ts'
import { ApiError } from '../lib/errors.ts'
import { newId } from '../lib/ids.ts'
import type { Ledger } from '../ledger/ledger.ts'
import { errorResponse } from '../platform/errors.ts'
import type { KeyCache } from '../platform/key-cache.ts'
import type { CommitFence } from '../ledger/fence.ts'
import type { OwnedOrganizations } from '../platform/ownership.ts'
import { clusterFence } from './fence.ts'
import { clusterGate, operatorWriteTarget, secretMatches, SECRET_HEADER, type Gate } from './forward.ts'
import { Leases } from './leases.ts'
import { partitionOf } from './partitions.ts'

/** At most this long a partition given back waits for the writer to finish its operations; the fence covers any later one. */
const DRAIN_WAIT_MS = 2_000

/** What the cluster needs of the server once it is built. */
export interface ClusterServing {
  ledger: Ledger
  db: Database
  keys: KeyCache
  wallNowMs(): number
  /** The whole server's answer to a request (the front, then the app). */
  handle(request: Request): Promise<Response>
  /** Loads module state of organizations this server becomes the owner of (payments' holds), after the ledger's. */
  loaders: Array<(orgIds: readonly string[]) => Promise<void>>
  log(line: string): void
}

/**
 * This server as a member of a cluster (docs/scale-out.md, "Cluster mode"): its partition leases,
 * the gate in front of the app that forwards other owners' partner requests, the ledger's
 * admission check and commit fence, and the internal listener that answers forwarded requests.
 */
export interface ClusterNode {
  readonly instanceId: string
  readonly partitionCount: number
  /** Refuses, before anything is reserved, an operation for an organization this server does not serve. */
  admit(orgId: string): void
  /** The ledger's commit fence. */
  readonly fence: CommitFence
  /** In front of the app: a Response (forwarded, or refused) or undefined (answered here). */
  readonly gate: Gate
  /** The organizations of the partitions served now, as a condition for the background passes' queries (migration 0052's `kassa_partition`). */
  readonly ownedOrganizations: OwnedOrganizations
  readonly leases: Leases
  /** Opens the internal listener and begins the heartbeat: partitions are taken and served from here on. */
  start(serving: ClusterServing, host: string): Promise<{ address: string }>
  /** Gives every partition back (drained) and closes the listener and the connection. */
  stop(): Promise<void>
}

/** Opens the cluster's connection and reads the partition count; nothing is held until `start`. */
export async function openCluster(config: ClusterConfig, databaseUrl: string): Promise<ClusterNode> {
  const instanceId = config.instanceId ?? `${hostname()}-${process.pid}-${newId('req').slice(-6)}`.replace(/[^A-Za-z0-9._:-]/g, '-').slice(0, 64)
  const socket = socketOf(databaseUrl)
  // Its own connections: a heartbeat must not queue behind requests for the pool.
  const sql = postgres(socket.url, {
    max: 2,
    idle_timeout: null as never,
    max_lifetime: null,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: `kassa cluster ${instanceId}`.slice(0, 63) },
    ...(socket.host === undefined ? {} : { host: socket.host }),
  })
  const [settings] = await sql<Array<{ partition_count: number }>>`select partition_count from cluster_settings`
  const partitionCount = settings!.partition_count
  let serving: ClusterServing | undefined
  let listener: ReturnType<typeof Bun.serve> | undefined
  const log = (line: string) => (serving ? serving.log(line) : console.error(line))

  const orgsIn = async (partitions: readonly number[]): Promise<string[]> => {
    const wanted = new Set(partitions)
    const rows = await serving!.db.select({ id: organizations.id }).from(organizations)
    return rows.map((row) => row.id).filter((id) => wanted.has(partitionOf(id, partitionCount)))
  }
  const leases = new Leases(
    sql,
    { instanceId, ttlMs: config.leaseTtlMs, heartbeatMs: config.heartbeatMs, partitionCount },
    {
      async load(partitions) {
        const orgIds = await orgsIn(partitions)
        await serving!.ledger.loadOrganizations(orgIds)
        for (const loader of serving!.loaders) await loader(orgIds)
      },
      async drain() {
        await Promise.race([serving!.ledger.drain(), Bun.sleep(DRAIN_WAIT_MS)])
      },
      async forget(partitions) {
        serving!.ledger.forgetOrganizations(new Set(await orgsIn(partitions)))
      },
      log,
    },
  )
  const gate = clusterGate({
    leases,
    instanceId,
    partitionCount,
    secret: config.secret,
    keys: () => serving?.keys,
    wallNowMs: () => serving?.wallNowMs() ?? Date.now(),
    async operatorOrgOf(request, path) {
      const target = operatorWriteTarget(path)
      if (target === undefined || serving === undefined) return undefined
      if ('orgId' in target) return target.orgId
      const accountOrg = async (accountId: string) =>
        (await serving!.db.select({ orgId: accounts.orgId }).from(accounts).where(eq(accounts.id, accountId)).limit(1))[0]?.orgId
      if ('withdrawalId' in target) {
        return (await serving.db.select({ orgId: withdrawals.orgId }).from(withdrawals).where(eq(withdrawals.id, target.withdrawalId)).limit(1))[0]?.orgId
      }
      if ('accountId' in target) return accountOrg(target.accountId)
      // A suspense arrival is credited to the account its body names: read from a copy, the app reads the body itself.
      const body = (await request.clone().json().catch(() => undefined)) as { accountId?: unknown } | undefined
      return typeof body?.accountId === 'string' ? accountOrg(body.accountId) : undefined
    },
  })
  const admit = (orgId: string) => {
    if (leases.serves(partitionOf(orgId, partitionCount))) return
    throw new ApiError('partner_unavailable', 'this server does not own the organization now; nothing was applied; retry', { headers: { 'retry-after': '1' } })
  }
  return {
    instanceId,
    partitionCount,
    admit,
    fence: clusterFence(instanceId, partitionCount, (partition) => leases.epochOf(partition)),
    gate,
    ownedOrganizations(column) {
      // Work of no organization (an arrival at no deposit address, on its way to suspense) stays
      // every server's, as it was before cluster mode: its changes are conditional updates.
      const served = leases.summary().serving
      if (served.length === 0) return sqlText`${column} is null`
      return sqlText`(${column} is null or kassa_partition(${column}, ${partitionCount}) in (${sqlText.join(
        served.map((partition) => sqlText`${partition}`),
        sqlText`, `,
      )}))`
    },
    leases,
    async start(given, host) {
      serving = given
      // What this process loaded at start of every organization is forgotten: it decides only for
      // the partitions it takes, each loaded afresh when taken.
      given.ledger.forgetOrganizations(new Set((await given.db.select({ id: organizations.id }).from(organizations)).map((row) => row.id)))
      listener = Bun.serve({
        hostname: host,
        port: config.internalPort,
        reusePort: false,
        fetch(request) {
          if (!secretMatches(request.headers.get(SECRET_HEADER), config.secret)) {
            return errorResponse(new ApiError('authentication_error', 'This listener answers only the servers of the cluster'), newId('req'))
          }
          return given.handle(request)
        },
      })
      const advertised = config.internalHost ?? (host === '0.0.0.0' || host === '::' ? hostname() : host)
      const address = `${advertised}:${listener.port}`
      await leases.start(address)
      return { address }
    },
    async stop() {
      await leases.stop().catch(() => {})
      listener?.stop(true)
      await sql.end({ timeout: 2 }).catch(() => {})
    },
  }
}
