/**
 * A large partner's idle accounts: start-up time and resident memory of the real server as the
 * number of funded accounts grows, beside a plain process that loads the same rows, and the cost
 * of an account's first touch on the authorize path. Figures only: nothing here passes or fails.
 *
 * For each size in RESIDENCY_SIZES (default 100000,1000000) it makes a throwaway Postgres database
 * (DATABASE_URL, or the local default), creates one organization through the API, inserts that
 * many accounts with one funded USDC balance each straight into `accounts`, `ledger_movements` and
 * `ledger_balances` (as a migration from another system would), then:
 * - starts `bun server/main.ts` on it and measures the time from spawn to its first answer, and its
 *   resident memory: peak during start (VmHWM) and steady (VmRSS, two seconds after the first answer);
 * - runs a plain Bun process that selects the same `ledger_balances` and `accounts` rows into
 *   arrays, and reads its resident memory the same way (the ratio's floor);
 * - authorizes 200 payments on accounts never touched (first touch) and 200 more on the same
 *   accounts (resident), one at a time, and prints the p50 and p99 of each.
 *
 *   ./node_modules/.bin/bun bench/residency.bench.ts
 */
import postgres from 'postgres'
import { createBenchDatabase, OPERATOR_TOKEN, percentile, round2, startServer, writeResults } from './support.ts'
import { runMigrations, openDatabase, EMBEDDED_IN_MEMORY } from '../db/client.ts'

const SIZES = (process.env.RESIDENCY_SIZES ?? '100000,1000000').split(',').map(Number)
const TOUCHES = 200

function memoryOf(pid: number): { rssMb: number; peakMb: number } {
  const status = require('node:fs').readFileSync(`/proc/${pid}/status`, 'utf8') as string
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0)
  return { rssMb: round2(kb('VmRSS') / 1024), peakMb: round2(kb('VmHWM') / 1024) }
}

async function seed(url: string, orgId: string, count: number): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  const ids = `select 'acct_bench' || lpad(g::text, 8, '0') as a from generate_series(0, ${count - 1}) as g`
  await sql.unsafe(`insert into accounts (id, org_id, external_id, type, metadata, status, created_at)
    select a, '${orgId}', 'ext-' || a, 'individual', '{}'::jsonb, 'active', now() from (${ids}) as t`)
  await sql.unsafe(`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
    select 'mv_seed_' || a, '${orgId}', 'sandbox_funding', 'mv_seed_' || a, now(), array[a, 'system:faucet'], array['available', 'available'],
      array['USDC', 'USDC'], array[100000000::numeric, -100000000::numeric] from (${ids}) as t`)
  await sql.unsafe(`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
    select '${orgId}', a, 'USDC', 'customer', 100000000, 0, 0, 100000000, now() from (${ids}) as t`)
  await sql.unsafe(`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
    values ('${orgId}', 'system:faucet', 'USDC', 'system', ${-100000000n * BigInt(count)}, 0, 0, ${-100000000n * BigInt(count)}, now())
    on conflict (org_id, account_id, asset) do update set available = excluded.available, total = excluded.total`)
  await sql.unsafe('vacuum analyze accounts')
  await sql.unsafe('vacuum analyze ledger_balances')
  await sql.end()
}

/** The floor: the same rows as plain objects in a process that does nothing else. */
async function plainRowsMemory(url: string): Promise<{ rssMb: number; peakMb: number; loadMs: number }> {
  const script = `
    import postgres from 'postgres'
    const started = performance.now()
    const sql = postgres(${JSON.stringify(url)}, { max: 1, onnotice: () => {} })
    const balances = await sql\`select * from ledger_balances\`
    const accounts = await sql\`select id, org_id, external_id, status from accounts\`
    const loadMs = performance.now() - started
    Bun.gc(true)
    await Bun.sleep(2000)
    const status = require('node:fs').readFileSync('/proc/self/status', 'utf8')
    const kb = (f) => Number(new RegExp(f + ':\\\\s+(\\\\d+) kB').exec(status)[1])
    console.log(JSON.stringify({ rows: balances.length + accounts.length, rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024, loadMs }))
    await sql.end()
  `
  const child = Bun.spawn(['./node_modules/.bin/bun', '-e', script], { stdout: 'pipe', stderr: 'inherit' })
  const text = await new Response(child.stdout).text()
  await child.exited
  const parsed = JSON.parse(text.trim().split('\n').pop()!)
  return { rssMb: round2(parsed.rssMb), peakMb: round2(parsed.peakMb), loadMs: round2(parsed.loadMs) }
}

/** Each authorization's time, one at a time; a decline (the budget ran out, as on a loaded host) is counted, not thrown. */
async function authorizeEach(base: string, key: string, accounts: string[], outcomes: Record<string, number>): Promise<number[]> {
  const times: number[] = []
  for (const accountId of accounts) {
    const started = performance.now()
    const response = await fetch(`${base}/v1/payments/authorize`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ accountId, asset: 'USDC', amount: '1.25', merchant: { name: 'Coffee', mcc: '5814' } }),
    })
    const body = (await response.json()) as { state?: string }
    times.push(performance.now() - started)
    const outcome = body.state === 'authorized' ? 'authorized' : ((body as { failureCode?: string }).failureCode ?? JSON.stringify(body).slice(0, 80))
    outcomes[outcome] = (outcomes[outcome] ?? 0) + 1
  }
  return times.sort((a, b) => a - b)
}

const results = []
for (const size of SIZES) {
  const database = await createBenchDatabase('residency')
  let stopServer: (() => Promise<void>) | undefined
  try {
    const handle = await openDatabase({ databaseUrl: database.url, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 2 })
    await runMigrations(handle, database.url)
    await handle.close()
    // The organization through the real API, on a first server that is then stopped.
    const first = await startServer({ ...database.serverEnv, WARM_UP_AUTHORIZATIONS: '0', WEBHOOK_DELIVERY: 'false' })
    const org = (await (await fetch(`${first.base}/ops/v1/orgs`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Large partner' }) })).json()) as any
    await fetch(`${first.base}/ops/v1/orgs/${org.id}/limits`, { method: 'PATCH', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ rateLimitPerMinute: 10_000_000 }) })
    await first.stop()
    const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
    const seeded = performance.now()
    await seed(database.url, org.id, size)
    const seedMs = performance.now() - seeded

    const spawnedAt = performance.now()
    const server = await startServer({ ...database.serverEnv, WARM_UP_AUTHORIZATIONS: '0', WEBHOOK_DELIVERY: 'false', LOAD_SHEDDING: 'false' })
    stopServer = () => server.stop()
    for (;;) {
      const health = await fetch(`${server.base}/health`).catch(() => undefined)
      if (health?.status === 200) break
    }
    const startMs = performance.now() - spawnedAt
    await Bun.sleep(2000)
    const kassa = memoryOf(server.process.pid)
    const touched = Array.from({ length: TOUCHES }, (_, index) => `acct_bench${String(Math.floor((index * size) / TOUCHES)).padStart(8, '0')}`)
    const firstTouchOutcomes: Record<string, number> = {}
    const residentOutcomes: Record<string, number> = {}
    const firstTouch = await authorizeEach(server.base, key, touched, firstTouchOutcomes)
    const resident = await authorizeEach(server.base, key, touched, residentOutcomes)
    await server.stop()
    stopServer = undefined
    const plain = await plainRowsMemory(database.url)
    const row = {
      accounts: size,
      seedS: round2(seedMs / 1000),
      startS: round2(startMs / 1000),
      kassaRssMb: kassa.rssMb,
      kassaPeakMb: kassa.peakMb,
      plainRowsRssMb: plain.rssMb,
      plainRowsLoadS: round2(plain.loadMs / 1000),
      rssRatio: round2(kassa.rssMb / plain.rssMb),
      bytesPerAccountKassa: round2((kassa.rssMb * 1024 * 1024) / size),
      bytesPerAccountPlain: round2((plain.rssMb * 1024 * 1024) / size),
      firstTouchP50Ms: round2(percentile(firstTouch, 0.5)),
      firstTouchP99Ms: round2(percentile(firstTouch, 0.99)),
      residentP50Ms: round2(percentile(resident, 0.5)),
      residentP99Ms: round2(percentile(resident, 0.99)),
      firstTouchOutcomes,
      residentOutcomes,
    }
    console.log(JSON.stringify(row))
    results.push(row)
  } finally {
    await stopServer?.()
    await database.drop()
  }
}

const header = '| accounts | start to first answer (s) | Kassa RSS steady / peak (MB) | plain rows RSS (MB) | ratio | bytes/account Kassa / plain | authorize p50/p99 first touch (ms) | resident (ms) |\n|---|---|---|---|---|---|---|---|\n'
const lines = results.map((r) => `| ${r.accounts.toLocaleString('en')} | ${r.startS} | ${r.kassaRssMb} / ${r.kassaPeakMb} | ${r.plainRowsRssMb} | ${r.rssRatio}× | ${r.bytesPerAccountKassa} / ${r.bytesPerAccountPlain} | ${r.firstTouchP50Ms} / ${r.firstTouchP99Ms} | ${r.residentP50Ms} / ${r.residentP99Ms} |`)
console.log(header + lines.join('\n'))
console.log(`written to ${writeResults('residency', results, header + lines.join('\n') + '\n')}`)
