/**
 * Cluster mode benchmark. Figures only: nothing here passes or fails.
 *
 * 1. Authorizations with 1, 2 and 3 servers in cluster mode on one Postgres database, spread over
 *    BENCH_ORGS organizations, in a closed loop (BENCH_CONNECTIONS keep-alive connections as fast as
 *    they go): throughput, p50, p99 and max; each request sent to a server in turn, as a load
 *    balancer that knows nothing of owners would (so with N servers about (N-1)/N are forwarded),
 *    and, beside it, each sent to its organization's owner.
 * 2. One authorization at a time (BENCH_SEQUENTIAL requests) against the owner and against a
 *    server that forwards to it: the cost of a forwarded request beside a local one.
 *
 * Everything runs on this machine: the servers, Postgres and the load generator share its cores,
 * so more servers compete for the same CPUs; read the figures as what forwarding costs and what a
 * second process on the same cores buys, not as scaling across machines.
 *
 * Settings: BENCH_DURATION_MS (per run, default 5000), BENCH_CONNECTIONS (default 64), BENCH_ORGS
 * (default 6), BENCH_ACCOUNTS (per org, default 8), BENCH_SEQUENTIAL (default 2000),
 * BENCH_SERVERS (default "1,2,3"). Writes JSON and markdown to bench/results/.
 */
import postgres from 'postgres'
import { partitionOf } from '../server/cluster/partitions.ts'
import { KeepAliveClient } from './http-client.ts'
import { createBenchDatabase, createFundedOrg, percentile, round2, startServer, writeResults, type BenchOrg, type ServerProcess } from './support.ts'

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 5000)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64)
const ORGS = Number(process.env.BENCH_ORGS ?? 6)
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 8)
const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 2000)
const SERVER_COUNTS = (process.env.BENCH_SERVERS ?? '1,2,3').split(',').map(Number)
const SECRET = 'bench-cluster-secret-0123456789abcdef0123456789'
const WARMUP_MS = 1000

interface Member {
  id: string
  server: ServerProcess
  client: KeepAliveClient
}

interface LoopFigures {
  servers: number
  routing: 'round robin' | 'to the owner'
  approved: number
  refused: number
  throughputPerSecond: number
  p50Ms: number
  p99Ms: number
  maxMs: number
}

const authorizeBody = (org: BenchOrg, index: number) => JSON.stringify({ accountId: org.accounts[index % org.accounts.length], asset: 'USDC', amount: '0.01' })

async function startCluster(count: number, serverEnv: Record<string, string>): Promise<Member[]> {
  const members: Member[] = []
  for (let index = 0; index < count; index++) {
    const id = `bench-${index}`
    const server = await startServer({
      ...serverEnv,
      KASSA_CLUSTER: '1',
      KASSA_CLUSTER_SECRET: SECRET,
      KASSA_INSTANCE_ID: id,
      WARM_UP_AUTHORIZATIONS: '0',
      LOAD_SHEDDING: 'false',
      WEBHOOK_DELIVERY_PROCESS: 'false',
    })
    members.push({ id, server, client: new KeepAliveClient(server.base) })
  }
  return members
}

/** Waits until every partition is held with a live lease and each server holds its fair share or less. */
async function waitForSpread(url: string, ids: readonly string[]): Promise<Map<number, string>> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    for (let attempt = 0; attempt < 600; attempt++) {
      const rows = await sql<Array<{ partition: number; holder: string | null }>>`select partition, case when expires_at > now() then holder end as holder from cluster_partitions`
      const counts = new Map<string, number>()
      for (const row of rows) if (row.holder !== null) counts.set(row.holder, (counts.get(row.holder) ?? 0) + 1)
      const fair = Math.ceil(64 / ids.length)
      if (rows.every((row) => row.holder !== null) && ids.every((id) => (counts.get(id) ?? 0) > 0 && (counts.get(id) ?? 0) <= fair)) {
        return new Map(rows.map((row) => [row.partition, row.holder!]))
      }
      await Bun.sleep(100)
    }
    throw new Error('the partitions did not settle within 60 s')
  } finally {
    await sql.end()
  }
}

/** Waits until an org's account is served through every server. */
async function waitServed(members: readonly Member[], org: BenchOrg): Promise<void> {
  for (const member of members) {
    for (let attempt = 0; ; attempt++) {
      const answer = await member.client.request('GET', `/v1/accounts/${org.accounts[0]}/balances`, { authorization: `Bearer ${org.key}` })
      if (answer.status === 200) break
      if (attempt > 600) throw new Error(`org ${org.id} not served through ${member.id}`)
      await Bun.sleep(50)
    }
  }
}

async function closedLoop(members: readonly Member[], orgs: readonly BenchOrg[], routing: LoopFigures['routing'], ownerOf: (org: BenchOrg) => Member): Promise<LoopFigures> {
  const latencies: number[] = []
  let approved = 0
  let refused = 0
  let measuring = false
  let stop = false
  let sent = 0
  const worker = async (connection: number) => {
    while (!stop) {
      const index = sent++
      const org = orgs[index % orgs.length]!
      const member = routing === 'to the owner' ? ownerOf(org) : members[(index + connection) % members.length]!
      const startedAt = performance.now()
      const answer = await member.client.request('POST', '/v1/payments/authorize', { authorization: `Bearer ${org.key}`, 'content-type': 'application/json' }, authorizeBody(org, index))
      if (!measuring) continue
      latencies.push(performance.now() - startedAt)
      if (answer.status === 201) approved += 1
      else refused += 1
    }
  }
  const workers = Array.from({ length: CONNECTIONS }, (_, connection) => worker(connection))
  await Bun.sleep(WARMUP_MS)
  measuring = true
  const startedAt = performance.now()
  await Bun.sleep(DURATION_MS)
  measuring = false
  const ranMs = performance.now() - startedAt
  stop = true
  await Promise.all(workers)
  latencies.sort((a, b) => a - b)
  return {
    servers: members.length,
    routing,
    approved,
    refused,
    throughputPerSecond: Math.round((approved * 1000) / ranMs),
    p50Ms: round2(percentile(latencies, 0.5)),
    p99Ms: round2(percentile(latencies, 0.99)),
    maxMs: round2(latencies.at(-1) ?? 0),
  }
}

type Sequential = { p50Ms: number; p99Ms: number; meanMs: number; refused: number }

/**
 * One authorization at a time, alternating between the owner and a server that forwards to it, so
 * that both see the same moment of a shared machine (a run of one after the other measured the
 * second warmer than the first).
 */
async function sequential(owner: Member, other: Member, org: BenchOrg): Promise<{ local: Sequential; forwarded: Sequential }> {
  const latencies: [number[], number[]] = [[], []]
  const refused = [0, 0]
  for (let index = 0; index < 2 * (SEQUENTIAL + 200); index++) {
    const side = index % 2
    const member = side === 0 ? owner : other
    const startedAt = performance.now()
    const answer = await member.client.request('POST', '/v1/payments/authorize', { authorization: `Bearer ${org.key}`, 'content-type': 'application/json' }, authorizeBody(org, index))
    if (index < 400) continue
    latencies[side]!.push(performance.now() - startedAt)
    if (answer.status !== 201) refused[side]! += 1
  }
  const figures = (side: 0 | 1): Sequential => {
    const sorted = latencies[side].sort((a, b) => a - b)
    return { p50Ms: round2(percentile(sorted, 0.5)), p99Ms: round2(percentile(sorted, 0.99)), meanMs: round2(sorted.reduce((sum, value) => sum + value, 0) / sorted.length), refused: refused[side]! }
  }
  return { local: figures(0), forwarded: figures(1) }
}

const loops: LoopFigures[] = []
let forwarding: { local: Sequential; forwarded: Sequential } | undefined

for (const count of SERVER_COUNTS) {
  const database = await createBenchDatabase(`cluster${count}`)
  const members = await startCluster(count, database.serverEnv)
  try {
    const owners = await waitForSpread(database.url, members.map((member) => member.id))
    const orgs: BenchOrg[] = []
    for (let index = 0; index < ORGS; index++) {
      // Created through the owner of nothing in particular: any server takes operator writes, and
      // partner writes are forwarded to the owner.
      orgs.push(await createFundedOrg(members[index % members.length]!.server.base, `cluster-${count}-${index}`, ACCOUNTS, '1000000'))
    }
    for (const org of orgs) await waitServed(members, org)
    const ownerOf = (org: BenchOrg) => members.find((member) => member.id === owners.get(partitionOf(org.id, 64)))!
    const spread = members.map((member) => `${member.id}: ${orgs.filter((org) => ownerOf(org) === member).length} orgs`).join(', ')
    console.error(`${count} server(s); organizations by owner: ${spread}`)
    loops.push(await closedLoop(members, orgs, 'round robin', ownerOf))
    console.error(JSON.stringify(loops.at(-1)))
    if (count > 1) {
      loops.push(await closedLoop(members, orgs, 'to the owner', ownerOf))
      console.error(JSON.stringify(loops.at(-1)))
    }
    if (count === 2 && forwarding === undefined) {
      const org = orgs[0]!
      const owner = ownerOf(org)
      const other = members.find((member) => member !== owner)!
      forwarding = await sequential(owner, other, org)
      console.error(JSON.stringify(forwarding))
    }
  } finally {
    for (const member of members) member.client.close()
    await Promise.all(members.map((member) => member.server.stop()))
    await database.drop()
  }
}

const lines = [
  '# Cluster mode',
  '',
  `Closed loop, ${CONNECTIONS} connections, ${DURATION_MS} ms per run, ${ORGS} organizations of ${ACCOUNTS} accounts, authorizations of 0.01 USDC; servers, Postgres and the generator on one host.`,
  '',
  '| servers | routing | approved/s | p50 ms | p99 ms | max ms | refused |',
  '| ---: | --- | ---: | ---: | ---: | ---: | ---: |',
  ...loops.map((loop) => `| ${loop.servers} | ${loop.routing} | ${loop.throughputPerSecond} | ${loop.p50Ms} | ${loop.p99Ms} | ${loop.maxMs} | ${loop.refused} |`),
  '',
]
if (forwarding !== undefined) {
  lines.push(
    `One authorization at a time (${SEQUENTIAL} each, alternating), two servers:`,
    '',
    '| sent to | p50 ms | p99 ms | mean ms | refused |',
    '| --- | ---: | ---: | ---: | ---: |',
    `| the owner | ${forwarding.local.p50Ms} | ${forwarding.local.p99Ms} | ${forwarding.local.meanMs} | ${forwarding.local.refused} |`,
    `| another server (forwarded) | ${forwarding.forwarded.p50Ms} | ${forwarding.forwarded.p99Ms} | ${forwarding.forwarded.meanMs} | ${forwarding.forwarded.refused} |`,
    '',
  )
}
const markdown = lines.join('\n')
console.log(markdown)
console.error(`written to ${writeResults('cluster', { loops, forwarding }, markdown)}`)
