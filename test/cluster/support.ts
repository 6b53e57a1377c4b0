import { expect } from 'bun:test'
import postgres from 'postgres'
import { partitionOf } from '../../server/cluster/partitions.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'
import { startServerProcess, type ServerProcess } from '../support/server-process.ts'

export const OPERATOR_TOKEN = 'cluster-test-operator-token-0123456789abcdef'
const SECRET = 'cluster-test-secret-0123456789abcdef0123456789'
/** Short leases, so failover takes seconds: a lease lasts 1.5 s and is renewed every 300 ms. */
export const LEASE_TTL_MS = 1500
const HEARTBEAT_MS = 300

export interface Member {
  id: string
  server: ServerProcess
}

/** Starts a cluster member on the database, named `id`. */
export async function startMember(databaseUrl: string, id: string, env: Record<string, string> = {}): Promise<Member> {
  const server = await startServerProcess({
    DATABASE_URL: databaseUrl,
    OPERATOR_TOKEN,
    KASSA_CLUSTER: '1',
    KASSA_CLUSTER_SECRET: SECRET,
    KASSA_INSTANCE_ID: id,
    KASSA_LEASE_TTL_MS: String(LEASE_TTL_MS),
    KASSA_HEARTBEAT_MS: String(HEARTBEAT_MS),
    WEBHOOK_DELIVERY_PROCESS: 'false',
    ...env,
  })
  return { id, server }
}

export interface Answer {
  status: number
  body: any
}

/** One request to a server; a refused connection (a killed server) answers status 0. */
export async function call(baseUrl: string, token: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  try {
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await response.text()
    return { status: response.status, body: text === '' ? undefined : JSON.parse(text) }
  } catch (error) {
    return { status: 0, body: String(error) }
  }
}

/** The database's view of the cluster, read on a connection of the test's own. */
export function clusterTable(databaseUrl: string) {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} })
  return {
    /** The member holding the organization's partition with a live lease, and the epoch. */
    async ownerOf(orgId: string): Promise<{ holder: string | null; epoch: bigint; live: boolean }> {
      const [settings] = await sql<Array<{ partition_count: number }>>`select partition_count from cluster_settings`
      const partition = partitionOf(orgId, settings!.partition_count)
      const [row] = await sql<Array<{ holder: string | null; epoch: string; live: boolean }>>`
        select holder, epoch::text as epoch, holder is not null and expires_at > now() as live from cluster_partitions where partition = ${partition}`
      return { holder: row!.holder, epoch: BigInt(row!.epoch), live: row!.live }
    },
    /** Partitions per live holder, and how many nobody holds. */
    async spread(): Promise<Record<string, number>> {
      const rows = await sql<Array<{ holder: string | null; count: number }>>`
        select case when holder is not null and expires_at > now() then holder end as holder, count(*)::int as count from cluster_partitions group by 1`
      return Object.fromEntries(rows.map((row) => [row.holder ?? '(none)', row.count]))
    },
    async rows<Row>(query: string, parameters: unknown[] = []): Promise<Row[]> {
      return (await sql.unsafe(query, parameters as never[])) as unknown as Row[]
    },
    end: () => sql.end({ timeout: 2 }),
  }
}

/** Waits until every partition is held by one of `ids` with a live lease, spread as the fair share allows. */
export async function waitForSpread(table: ReturnType<typeof clusterTable>, ids: readonly string[], timeoutMs = 30_000): Promise<Record<string, number>> {
  const settled = await eventually(
    async () => {
      const spread = await table.spread()
      const fair = Math.ceil(64 / ids.length)
      const held = ids.reduce((sum, id) => sum + (spread[id] ?? 0), 0)
      return held === 64 && ids.every((id) => (spread[id] ?? 0) > 0 && (spread[id] ?? 0) <= fair) ? spread : undefined
    },
    { what: `every partition held by ${ids.join(', ')}`, timeoutMs, intervalMs: 100 },
  )
  return settled!
}

/** Waits until a read of the account answers 200 through every server (its owner has loaded it). */
export async function waitServed(baseUrls: readonly string[], key: string, accountId: string, timeoutMs = 30_000): Promise<void> {
  for (const baseUrl of baseUrls) {
    await eventually(
      async () => {
        const answer = await call(baseUrl, key, 'GET', `/v1/accounts/${accountId}/balances`)
        return answer.status === 200 ? true : answer
      },
      { what: `the account served through ${baseUrl}`, timeoutMs, intervalMs: 50, accept: (value) => value === true },
    )
  }
}

/**
 * A setup call as a client of a cluster makes it: while the organization's owner is changing (the
 * servers still spreading their partitions) the answer is 503 `partner_unavailable`, "nothing was
 * done; retry", so it is sent again, with one Idempotency-Key for all its tries.
 */
export async function callUntilServed(baseUrl: string, token: string, method: string, path: string, body?: unknown): Promise<Answer> {
  const headers: Record<string, string> = method === 'GET' ? {} : { 'idempotency-key': `setup-${Math.random().toString(36).slice(2)}` }
  return eventually(() => call(baseUrl, token, method, path, body, headers), {
    what: `${method} ${path} answered by the organization's owner`,
    timeoutMs: 30_000,
    intervalMs: 50,
    accept: (answer) => answer.status !== 0 && answer.status !== 503,
  })
}

/** The account's available balance of an asset as one server answers it. */
export async function available(baseUrl: string, key: string, accountId: string, asset = 'USDC'): Promise<string> {
  const answer = await call(baseUrl, key, 'GET', `/v1/accounts/${accountId}/balances`)
  if (answer.status !== 200) throw new Error(`balance read through ${baseUrl}: ${answer.status} ${JSON.stringify(answer.body)}`)
  return answer.body.balances.find((balance: { asset: string }) => balance.asset === asset)?.available
}

/** Members on one fresh database, every partition held by them, and their end. */
export interface Cluster {
  database: TestDatabase
  members: Member[]
  table: ReturnType<typeof clusterTable>
  urls(): string[]
  /** Stops every member (a stopped one is continued first), ends the table's connection, drops the database. */
  end(): Promise<void>
}

/** Starts members `ids` (a, b and c by default) on a fresh database and waits until they spread every partition. */
export async function startCluster(env: Record<string, string> = {}, ids: readonly string[] = ['a', 'b', 'c']): Promise<Cluster> {
  const database = await createTestDatabase()
  const members = await Promise.all(ids.map((id) => startMember(database.databaseUrl!, id, env)))
  const table = clusterTable(database.databaseUrl!)
  await waitForSpread(table, ids)
  return {
    database,
    members,
    table,
    urls: () => members.map((member) => member.server.baseUrl),
    async end() {
      for (const member of members) {
        if (member.server.child.exitCode === null && member.server.child.signalCode === null) member.server.child.kill('SIGCONT')
      }
      await Promise.all(members.map((member) => member.server.stop()))
      await table.end()
      await database.drop()
    },
  }
}

/** An organization created through `baseUrl`, with its test key and its rate limit raised for load. */
export async function clusterOrg(baseUrl: string, name: string, rateLimitPerMinute = 10_000_000): Promise<{ id: string; key: string }> {
  const org = (await callUntilServed(baseUrl, OPERATOR_TOKEN, 'POST', '/ops/v1/orgs', { name })).body
  expect((await callUntilServed(baseUrl, OPERATOR_TOKEN, 'PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute })).status).toBe(200)
  return { id: org.id, key: org.keys.find((entry: { type: string }) => entry.type === 'test').key }
}

/** The ledger proves itself through every server: no problem found. */
export async function verifiedEverywhere(baseUrls: readonly string[]): Promise<void> {
  for (const baseUrl of baseUrls) {
    const report = await call(baseUrl, OPERATOR_TOKEN, 'GET', '/ops/v1/ledger/verify')
    expect(report.status).toBe(200)
    expect(report.body.problems).toEqual([])
    expect(report.body.ok).toBe(true)
  }
}
