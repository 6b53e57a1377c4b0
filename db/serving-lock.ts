import { hostname } from 'node:os'
import postgres from 'postgres'
import { socketOf } from './client.ts'

/**
 * One serving process per Postgres database. Each server keeps balances in memory and decides
 * against them, so a second server on the same database would serve stale balances and refuse good
 * payments (no money is lost: the database's constraints hold, but answers are wrong). Until
 * cluster mode exists, the serving process holds a session-level advisory lock on a connection of
 * its own for its whole life, and a second one is refused, naming the holder.
 *
 * Cluster mode (`KASSA_CLUSTER=1`) shares the database between servers that agree on who owns
 * which organization (`server/cluster/`): each of them holds the same lock in shared mode. A
 * shared holder and an exclusive one exclude each other, so a server outside the cluster is
 * refused on a database a cluster serves, and a cluster server on a database a lone server serves.
 *
 * The lock belongs to the database (advisory locks are per database), so servers on other
 * databases of the same Postgres are not concerned; the CLI, migrations and the delivery process
 * never take it. The embedded database has its folder lock instead (`db/folder-lock.ts`).
 */

/** The lock's two keys (`pg_try_advisory_lock(int, int)`): "Kass" in ASCII, and 1. */
export const SERVING_LOCK_KEYS = [0x4b617373, 1] as const
/** The holder's identity, announced once it listens (migration 0019). */
const HOLDER_TABLE = 'serving_instance'
/** A restarted server may find its predecessor's connection still closing: it tries this long before refusing. */
const LOCK_WAIT_MS = 3_000
const LOCK_RETRY_MS = 100
/** How often the holder checks that its lock connection still holds the lock. */
export const LOCK_CHECK_MS = 5_000
const CONNECT_TIMEOUT_SECONDS = 10

/** Who serves a database, as far as a refused server can tell. */
export interface ServingHolder {
  host: string | null
  pid: number | null
  startedAt: string | null
  listen: string | null
  /** The holder's Postgres session: its backend pid, client address and application name. */
  backendPid: number
  /** Whether the holder is a cluster member (it holds the lock in shared mode). */
  cluster: boolean
  clientAddress: string | null
  applicationName: string | null
}

/** The database cannot be reached as DATABASE_URL says: one line saying why, for the operator. */
export class DatabaseUnavailable extends Error {
  override name = 'DatabaseUnavailable'
}

/** Another server serves this database. */
export class DatabaseInUse extends Error {
  override name = 'DatabaseInUse'
  constructor(
    readonly holder: ServingHolder | undefined,
    clusterMember = false,
  ) {
    super(
      holder?.cluster === true
        ? `a Kassa cluster already serves this database (one of its servers: ${describeHolder(holder)}). ` +
            'A server outside the cluster may not serve it: start this one with KASSA_CLUSTER=1 and the cluster\'s KASSA_CLUSTER_SECRET, or point DATABASE_URL at another database.'
        : `another Kassa server already serves this database${holder === undefined ? '' : `: ${describeHolder(holder)}`}. ` +
            (clusterMember
              ? 'It does not run in cluster mode, so no cluster server may join it: stop it and start every server with KASSA_CLUSTER=1, or point DATABASE_URL at another database.'
              : 'Only one server may serve a database outside cluster mode: stop that one, run every server with KASSA_CLUSTER=1, or point DATABASE_URL at another database.'),
    )
  }
}

export function describeHolder(holder: ServingHolder): string {
  const parts: string[] = []
  if (holder.pid !== null) parts.push(`process ${holder.pid}${holder.host === null ? '' : ` on ${holder.host}`}`)
  if (holder.listen !== null) parts.push(`listening on ${holder.listen}`)
  if (holder.startedAt !== null) parts.push(`started ${holder.startedAt}`)
  if (holder.pid === null) parts.push(`connected from ${holder.clientAddress ?? 'a local socket'} as "${holder.applicationName ?? ''}"`)
  parts.push(`Postgres backend ${holder.backendPid}`)
  return parts.join(', ')
}

/** Where DATABASE_URL points, for messages: host and port (or socket folder) and database; never the password. */
function placeOf(url: string): { where: string; database: string; user: string } {
  const parsed = new URL(url)
  const socketHost = parsed.searchParams.get('host')
  const where = socketHost ?? `${parsed.hostname || 'localhost'}:${parsed.port || '5432'}`
  const user = decodeURIComponent(parsed.username) || process.env.PGUSER || process.env.USER || ''
  const database = decodeURIComponent(parsed.pathname.slice(1)) || user
  return { where, database, user }
}

/**
 * The one line that says why a connection to DATABASE_URL failed, or undefined when `error` is not
 * a failure to connect (a query's own error).
 */
export function describeConnectFailure(error: unknown, url: string): string | undefined {
  const { where, database, user } = placeOf(url)
  const failure = error as { code?: string; message?: string; errno?: string }
  const code = failure?.code ?? failure?.errno
  const pgMessage = failure?.message ?? String(error)
  switch (code) {
    case 'ECONNREFUSED':
      return `DATABASE_URL: nothing accepts connections at ${where} (connection refused). Is Postgres running there, on that port?`
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `DATABASE_URL: the host of ${where} cannot be resolved`
    case 'ENOENT':
      return `DATABASE_URL: no Postgres socket at ${where}`
    case 'CONNECT_TIMEOUT':
    case 'ETIMEDOUT':
      return `DATABASE_URL: no answer from ${where} within ${CONNECT_TIMEOUT_SECONDS} s`
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `DATABASE_URL: ${where} is unreachable from here`
    case 'ECONNRESET':
    case 'CONNECTION_CLOSED':
    case 'CONNECTION_ENDED':
    case 'CONNECTION_DESTROYED':
      return `DATABASE_URL: ${where} closed the connection before it was ready (is it a Postgres server?)`
    case '3D000':
      return `DATABASE_URL: database "${database}" does not exist at ${where}. Create it (createdb ${database}) or name another database`
    case '28P01':
    case '28000':
      return `DATABASE_URL: ${where} refused user "${user}": ${pgMessage}`
    case '57P03':
      return `DATABASE_URL: the database at ${where} is starting up or shutting down; try again shortly`
    case '53300':
      return `DATABASE_URL: ${where} has no connection slots left: ${pgMessage}`
    default:
      return undefined
  }
}

/** The serving process's hold on its database; `announce` once it listens, `release` at shutdown. */
export interface ServingLock {
  /** Writes who holds the lock (host, pid, start, listen address), for a refused server to name. */
  announce(listen: string): Promise<void>
  release(): Promise<void>
}

function applicationNameOf(identity: { host: string; pid: number }): string {
  // Postgres keeps 63 bytes of it.
  return `kassa server pid ${identity.pid} on ${identity.host}`.slice(0, 63)
}

/**
 * Takes the database for this serving process, or throws: `DatabaseUnavailable` (with one line
 * saying why) when it cannot be reached, `DatabaseInUse` (naming the holder) when another server
 * holds it. The lock lives on a connection of its own, never recycled; if that connection is lost
 * (Postgres restarted, a network cut), the lock is taken again as soon as it reconnects, and
 * `onLost` is called when another server took it meanwhile.
 */
export async function takeServingLock(
  url: string,
  options: { onLost: (holder: ServingHolder | undefined) => void; log?: (line: string) => void; clusterMember?: boolean },
): Promise<ServingLock> {
  const shared = options.clusterMember === true
  const identity = { host: hostname(), pid: process.pid, startedAt: new Date().toISOString() }
  const applicationName = applicationNameOf(identity)
  const socket = socketOf(url)
  const sql = postgres(socket.url, {
    max: 1,
    idle_timeout: null as never,
    max_lifetime: null,
    connect_timeout: CONNECT_TIMEOUT_SECONDS,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: applicationName },
    ...(socket.host === undefined ? {} : { host: socket.host }),
  })
  const [classKey, objectKey] = SERVING_LOCK_KEYS
  const tryLock = async () =>
    shared
      ? (await sql<Array<{ taken: boolean }>>`select pg_try_advisory_lock_shared(${classKey}::int, ${objectKey}::int) as taken`)[0]!.taken
      : (await sql<Array<{ taken: boolean }>>`select pg_try_advisory_lock(${classKey}::int, ${objectKey}::int) as taken`)[0]!.taken
  const held = async () =>
    (
      await sql<Array<{ held: boolean }>>`select exists (select 1 from pg_locks where locktype = 'advisory' and pid = pg_backend_pid() and classid = ${classKey}::int::oid and objid = ${objectKey}::int::oid and objsubid = 2 and granted) as held`
    )[0]!.held
  try {
    const until = Date.now() + LOCK_WAIT_MS
    while (!(await tryLock())) {
      if (Date.now() >= until) throw new DatabaseInUse(await readHolder(sql), shared)
      await Bun.sleep(LOCK_RETRY_MS)
    }
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {})
    if (error instanceof DatabaseInUse) throw error
    const line = describeConnectFailure(error, url)
    if (line !== undefined) throw new DatabaseUnavailable(line)
    throw error
  }

  let listen: string | null = null
  let stopped = false
  const announceRow = async () => {
    if (listen === null) return
    // A cluster's servers each announce themselves under a name of their own; a lone server as `server`.
    const lockName = shared ? `cluster ${identity.host} ${identity.pid}` : 'server'
    await sql`insert into serving_instance (lock_name, backend_pid, host, pid, started_at, listen, announced_at)
      values (${lockName}, pg_backend_pid(), ${identity.host}, ${identity.pid}, ${identity.startedAt}::timestamptz, ${listen}, now())
      on conflict (lock_name) do update set backend_pid = excluded.backend_pid, host = excluded.host, pid = excluded.pid,
        started_at = excluded.started_at, listen = excluded.listen, announced_at = excluded.announced_at`
  }
  // A lost connection loses the lock with it: check, and take it again when it is free.
  let checking = false
  const check = async () => {
    if (stopped || checking) return
    checking = true
    try {
      if (await held()) return
      if (await tryLock()) {
        options.log?.('kassa: the database lock was lost with its connection and is held again')
        await announceRow()
        return
      }
      const holder = await readHolder(sql)
      // Its own earlier session, cut off on this side (a network cut) but not yet noticed by
      // Postgres: ended, and the lock taken at the next check.
      if (holder !== undefined && holder.applicationName === applicationName && !holder.cluster) {
        await sql`select pg_terminate_backend(${holder.backendPid}::int)`
        return
      }
      options.onLost(holder)
    } catch {
      // The database is away: the next check tries again (the lock is free while nobody holds it).
    } finally {
      checking = false
    }
  }
  const timer = setInterval(() => void check(), LOCK_CHECK_MS)
  timer.unref?.()
  return {
    async announce(address: string) {
      listen = address
      await announceRow()
    },
    async release() {
      stopped = true
      clearInterval(timer)
      if (shared && listen !== null) await sql`delete from serving_instance where backend_pid = pg_backend_pid()`.catch(() => {})
      await sql`select pg_advisory_unlock_all()`.catch(() => {})
      await sql.end({ timeout: 2 }).catch(() => {})
    },
  }
}

/** Who holds the lock now: its Postgres session, and what it announced if that session announced. */
async function readHolder(sql: postgres.Sql): Promise<ServingHolder | undefined> {
  const [classKey, objectKey] = SERVING_LOCK_KEYS
  const [session] = await sql<Array<{ backend_pid: number; client_address: string | null; application_name: string | null; mode: string }>>`
    select a.pid as backend_pid, host(a.client_addr) as client_address, a.application_name, l.mode
    from pg_locks l join pg_stat_activity a on a.pid = l.pid
    where l.locktype = 'advisory' and l.database = (select oid from pg_database where datname = current_database())
      and l.classid = ${classKey}::int::oid and l.objid = ${objectKey}::int::oid and l.objsubid = 2 and l.granted
    limit 1`
  if (session === undefined) return undefined
  const holder: ServingHolder = {
    host: null,
    pid: null,
    startedAt: null,
    listen: null,
    backendPid: session.backend_pid,
    cluster: session.mode === 'ShareLock',
    clientAddress: session.client_address,
    applicationName: session.application_name,
  }
  const [table] = await sql<Array<{ name: string | null }>>`select to_regclass(${HOLDER_TABLE})::text as name`
  if (table?.name == null) return holder
  const [announced] = await sql<Array<{ host: string; pid: number; started_at: Date; listen: string }>>`
    select host, pid, started_at, listen from serving_instance where backend_pid = ${session.backend_pid} order by announced_at desc limit 1`
  if (announced === undefined) return holder
  return { ...holder, host: announced.host, pid: announced.pid, startedAt: new Date(announced.started_at).toISOString(), listen: announced.listen }
}
