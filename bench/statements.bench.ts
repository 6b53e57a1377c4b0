/**
 * Statement sealing benchmark (figures, not a test): one organization with BENCH_ACCOUNTS accounts
 * (100,000 by default), each with two movements booked on one business date, is sealed in one pass
 * (`StatementSealer.runOnce`: read the ledger snapshot, build every statement with its lines, hash,
 * sign with Ed25519, write the statements, the sealed date and one `statement.sealed` event each, in
 * one commit). Beside it, in the same run, the same statement and event rows are written by a plain
 * bulk insert (the same chunked JSON insert) into copies of the two tables with the same indexes and
 * no triggers. Prints both times, their ratio and the process's peak memory.
 *
 *   bun bench/statements.bench.ts            # BENCH_ACCOUNTS=20000 for a quicker run
 */
import { sql } from 'drizzle-orm'
import { bulkInsert } from '../db/bulk.ts'
import { openDatabase, queryRows } from '../db/client.ts'
import { events, statements } from '../db/schema/index.ts'
import { createApp } from '../server/app.ts'
import { configForTests } from '../test/support/config.ts'
import { createBenchDatabase } from './support.ts'

const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 100_000)
const CHUNK = 2000
const DAY = '2027-01-10'
const SEAL_AT_MS = Date.parse('2027-01-11T00:02:00.000Z')

let peakRss = 0
let peakHeap = 0
const sample = () => {
  const usage = process.memoryUsage()
  peakRss = Math.max(peakRss, usage.rss)
  peakHeap = Math.max(peakHeap, usage.heapUsed)
}
const sampler = setInterval(sample, 20)
const mb = (bytes: number) => Math.round(bytes / 1024 / 1024)

const database = await createBenchDatabase('statements')
const handle = await openDatabase({ databaseUrl: database.url, embeddedPath: 'memory://', poolMax: 4 })
const kassa = await createApp(configForTests({ databaseUrl: database.url, dataDir: '/tmp/kassa-bench-statements' }), { database: handle, wallClockMs: () => SEAL_AT_MS })
const db = kassa.runtime.db
try {
  const created = await kassa.handle(
    new Request('http://kassa.bench/ops/v1/orgs', {
      method: 'POST',
      headers: { authorization: `Bearer ${kassa.runtime.config.operatorToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Statements bench' }),
    }),
  )
  const orgId = ((await created.json()) as { id: string }).id

  // The ledger as the movements would leave it: per account a funding of 100 at 09:00 and a debit
  // of 12.5 to the fee account at 15:00, and the balance rows they sum to (the faucet and fee
  // accounts' too), written straight in SQL: the set-up is not what is measured.
  const setupStart = performance.now()
  await db.execute(sql`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
    select 'mv_f' || lpad(i::text, 8, '0'), ${orgId}, 'sandbox_funding', 'mv_f' || lpad(i::text, 8, '0'), ${`${DAY}T09:00:00Z`}::timestamptz + (i || ' ms')::interval,
      array['system:faucet', 'acct_' || lpad(i::text, 32, '0')], array['available', 'available'], array['USDC', 'USDC'], array[-100000000, 100000000]::numeric[]
    from generate_series(1, ${ACCOUNTS}) as i`)
  await db.execute(sql`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
    select 'mv_t' || lpad(i::text, 8, '0'), ${orgId}, 'transfer', 'tr_' || lpad(i::text, 32, '0'), ${`${DAY}T15:00:00Z`}::timestamptz + (i || ' ms')::interval,
      array['acct_' || lpad(i::text, 32, '0'), 'system:fees'], array['available', 'available'], array['USDC', 'USDC'], array[-12500000, 12500000]::numeric[]
    from generate_series(1, ${ACCOUNTS}) as i`)
  await db.execute(sql`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
    select ${orgId}, 'acct_' || lpad(i::text, 32, '0'), 'USDC', 'customer', 87500000, 0, 0, 87500000, now() from generate_series(1, ${ACCOUNTS}) as i
    union all select ${orgId}, 'system:faucet', 'USDC', 'system', ${-100_000_000n * BigInt(ACCOUNTS)}, 0, 0, ${-100_000_000n * BigInt(ACCOUNTS)}, now()
    union all select ${orgId}, 'system:fees', 'USDC', 'system', ${12_500_000n * BigInt(ACCOUNTS)}, 0, 0, ${12_500_000n * BigInt(ACCOUNTS)}, now()`)
  await db.execute(sql`analyze`)
  console.log(`set-up: ${ACCOUNTS} accounts, ${2 * ACCOUNTS} movements in ${Math.round(performance.now() - setupStart)} ms`)

  sample()
  const rssBefore = process.memoryUsage().rss
  peakRss = rssBefore
  peakHeap = process.memoryUsage().heapUsed
  const sealStart = performance.now()
  const sealed = await kassa.statements.sealer.runOnce()
  const sealMs = performance.now() - sealStart
  sample()
  const sealPeakRss = peakRss
  const count = sealed.find((entry) => entry.orgId === orgId && entry.businessDate === DAY)?.statements
  console.log(`sealed ${count} statements of ${DAY} in ${Math.round(sealMs)} ms (${Math.round((count ?? 0) / (sealMs / 1000))} statements/s)`)

  // The same rows, read back, then bulk inserted plainly into copies of the tables.
  const statementRows = (await db.select().from(statements)).map((row) => ({ ...row }))
  const eventRows = await db.select({ id: events.id, orgId: events.orgId, type: events.type, data: events.data, createdAt: events.createdAt }).from(events).where(sql`type = 'statement.sealed'`)
  await db.execute(sql`create table statements_plain (like statements including all)`)
  await db.execute(sql`create table events_plain (like events including all)`)
  const plainStatements = { ...statements } as typeof statements
  Object.assign(plainStatements, { [Symbol.for('drizzle:Name')]: 'statements_plain' })
  const plainEvents = { ...events } as typeof events
  Object.assign(plainEvents, { [Symbol.for('drizzle:Name')]: 'events_plain' })
  peakRss = process.memoryUsage().rss
  const plainStart = performance.now()
  await db.transaction(async (tx) => {
    for (let from = 0; from < statementRows.length; from += CHUNK) await tx.execute(bulkInsert(plainStatements, statementRows.slice(from, from + CHUNK)))
    for (let from = 0; from < eventRows.length; from += CHUNK) await tx.execute(bulkInsert(plainEvents, eventRows.slice(from, from + CHUNK)))
  })
  const plainMs = performance.now() - plainStart
  const [check] = await queryRows<{ statements: string; events: string }>(db, sql`select (select count(*) from statements_plain) as statements, (select count(*) from events_plain) as events`)
  console.log(`plain bulk insert of the same ${check!.statements} statement rows and ${check!.events} event rows: ${Math.round(plainMs)} ms`)
  console.log(`ratio sealing / plain insert: ${(sealMs / plainMs).toFixed(2)}x`)
  console.log(`peak memory while sealing: rss ${mb(sealPeakRss)} MB (${mb(sealPeakRss - rssBefore)} MB above the start of the pass), heap ${mb(peakHeap)} MB`)
} finally {
  clearInterval(sampler)
  await kassa.close()
  await database.drop()
}
