/**
 * Ledger benchmark: mitata for the in-memory decision, then a closed-loop HTTP run of transfers
 * against the real server on Postgres with group commit on and off. Prints figures and writes
 * JSON and markdown to bench/results/. Figures only: nothing here passes or fails.
 */
import { bench, run, summary } from 'mitata'
import { HotBalances, deltasOf, type Posting } from '../server/ledger/hot-balances.ts'
import { OPERATOR_TOKEN, call, createBenchDatabase, percentile, startServer, writeResults } from './support.ts'

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 64)
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 8000)
const WARMUP_MS = 1000

async function benchDecision(): Promise<void> {
  const balances = new HotBalances()
  const orgId = 'org_bench'
  balances.apply(deltasOf(orgId, [{ accountId: 'acct_a', kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor: 10n ** 30n }, { accountId: 'system:faucet', kind: 'system', bucket: 'available', asset: 'USDC', amountMinor: -(10n ** 30n) }], 1n).values())
  const postings: Posting[] = [
    { accountId: 'acct_a', kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor: -1_000_000n },
    { accountId: 'acct_b', kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor: 989_000n },
    { accountId: 'system:fees', kind: 'system', bucket: 'available', asset: 'USDC', amountMinor: 11_000n },
  ]
  summary(() => {
    bench('decide: overdraft check of a transfer (3 postings)', () => balances.findOverdraft(orgId, postings))
    bench('decide and reserve: check + apply a transfer in memory', () => {
      if (balances.findOverdraft(orgId, postings) === undefined) balances.apply(deltasOf(orgId, postings, 1n).values())
    })
  })
  await run()
}

interface HttpResult {
  mode: 'group commit on' | 'group commit off'
  clients: number
  durationMs: number
  completed: number
  errors: number
  throughputPerSecond: number
  p50Ms: number
  p99Ms: number
  maxMs: number
}

async function httpRun(groupCommit: boolean): Promise<HttpResult> {
  const database = await createBenchDatabase(groupCommit ? 'ledger_on' : 'ledger_off')
  const server = await startServer({ ...database.serverEnv, GROUP_COMMIT: String(groupCommit) })
  const base = server.base
  try {
    const org = (await call(base, 'POST', '/ops/v1/orgs', OPERATOR_TOKEN, { name: 'Bench' })).body
    const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
    await call(base, 'PATCH', `/ops/v1/orgs/${org.id}/limits`, OPERATOR_TOKEN, { rateLimitPerMinute: 10_000_000 })
    const accounts: string[] = []
    for (let index = 0; index < 16; index++) {
      const id = (await call(base, 'POST', '/v1/accounts', key, { externalId: `bench-${index}` })).body.id as string
      await call(base, 'POST', `/v1/sandbox/accounts/${id}/fund`, key, { asset: 'USDC', amount: '1000000' })
      accounts.push(id)
    }
    const latencies: number[] = []
    let errors = 0
    let measuring = false
    let stop = false
    const client = async (index: number) => {
      let turn = index
      while (!stop) {
        const source = accounts[turn % accounts.length]!
        const destination = accounts[(turn + 1) % accounts.length]!
        turn += 1
        const started = performance.now()
        const response = await call(base, 'POST', '/v1/transfers', key, { sourceAccountId: source, destinationAccountId: destination, asset: 'USDC', amount: '1' })
        if (!measuring) continue
        if (response.status === 201) latencies.push(performance.now() - started)
        else errors += 1
      }
    }
    const clients = Array.from({ length: CLIENTS }, (_, index) => client(index))
    await Bun.sleep(WARMUP_MS)
    measuring = true
    const startedAt = performance.now()
    await Bun.sleep(DURATION_MS)
    measuring = false
    const elapsed = performance.now() - startedAt
    stop = true
    await Promise.all(clients)
    const verify = (await call(base, 'GET', '/ops/v1/ledger/verify', OPERATOR_TOKEN)).body
    if (!verify.ok) console.error('verify failed after the run', verify.problems)
    latencies.sort((a, b) => a - b)
    return {
      mode: groupCommit ? 'group commit on' : 'group commit off',
      clients: CLIENTS,
      durationMs: Math.round(elapsed),
      completed: latencies.length,
      errors,
      throughputPerSecond: Math.round((latencies.length / elapsed) * 1000),
      p50Ms: Number(percentile(latencies, 0.5).toFixed(2)),
      p99Ms: Number(percentile(latencies, 0.99).toFixed(2)),
      maxMs: Number((latencies.at(-1) ?? 0).toFixed(2)),
    }
  } finally {
    await server.stop()
    await database.drop()
  }
}

await benchDecision()
const results: HttpResult[] = []
for (const groupCommit of [true, false]) {
  const result = await httpRun(groupCommit)
  console.log(result)
  results.push(result)
}
const table = [
  '| mode | clients | transfers/s | p50 ms | p99 ms | max ms | completed | errors |',
  '|---|---|---|---|---|---|---|---|',
  ...results.map((result) => `| ${result.mode} | ${result.clients} | ${result.throughputPerSecond} | ${result.p50Ms} | ${result.p99Ms} | ${result.maxMs} | ${result.completed} | ${result.errors} |`),
].join('\n')
console.log(`\nClosed-loop HTTP transfers on Postgres, ${DURATION_MS} ms each\n${table}`)
writeResults('ledger', { at: new Date().toISOString(), results }, `# Ledger transfers over HTTP (${new Date().toISOString()})\n\n${table}\n`)
