/**
 * One day's accruals for many positions, beside a plain bulk insert of the same rows, in the same
 * run. Figures only: nothing here passes or fails.
 *
 * It makes a throwaway database on the Postgres server (DATABASE_URL, or the local default), runs
 * the migrations and writes, straight in SQL, one vault with ACCRUALS_POSITIONS accounts (default
 * 100,000) holding shares from a cycle settled the day before, 1 % of them buying more and another
 * 1 % redeeming in a cycle settled at noon, and three prices (before the day, a move at 06:00, the
 * settlement's at noon). Then:
 *   1. compute: `Accruals.computeDay` for that day: reads the positions and the day's changes,
 *      computes every row (time-weighted shares, net, fee, gross) and writes them with the day's mark;
 *   2. plain: the same rows inserted into a copy of the table with the same statements (5,000 rows
 *      each, one transaction), nothing computed.
 * It prints both times, their ratio, and the process's peak resident memory while each ran.
 *
 *   ./node_modules/.bin/bun bench/accruals.bench.ts
 */
import { sql } from 'drizzle-orm'
import { openDatabase, queryRows, runMigrations } from '../db/client.ts'
import { Accruals } from '../server/modules/earning/accruals.ts'
import { insertAccrualRows } from '../server/modules/earning/accruals-repo.ts'
import type { Ledger } from '../server/ledger/ledger.ts'
import { VaultClock } from '../server/modules/vaults/clock.ts'
import { VaultCatalog } from '../server/modules/vaults/service.ts'
import { SandboxVenue } from '../server/modules/vaults/venue.ts'
import { createBenchDatabase } from './support.ts'

const POSITIONS = Number(process.env.ACCRUALS_POSITIONS ?? 100_000)
const DAY = '2026-03-10'
const HOUR = 3_600_000
const dayStart = Date.parse(`${DAY}T00:00:00Z`)
const iso = (ms: number) => new Date(ms).toISOString()

/** Peak resident memory over a piece of work, sampled every 10 ms. */
async function measured<T>(work: () => Promise<T>): Promise<{ result: T; ms: number; peakRssMb: number }> {
  let peak = process.memoryUsage.rss()
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 10)
  const started = performance.now()
  const result = await work()
  const ms = performance.now() - started
  clearInterval(sampler)
  peak = Math.max(peak, process.memoryUsage.rss())
  return { result, ms, peakRssMb: peak / 1024 / 1024 }
}

const database = await createBenchDatabase('accruals')
const handle = await openDatabase({ databaseUrl: database.url, embeddedPath: 'memory://', poolMax: 4 })
try {
  await runMigrations(handle, database.url)
  const db = handle.db
  const changed = Math.floor(POSITIONS / 100)
  await db.execute(sql`insert into vaults values ('bench', 'Bench', 'USDC', 'active', 1000000, 500000, null, null, 0, 0, 1000, 'direct', 172800, 0, ${`${10n ** 18n}`}, ${iso(dayStart - 3 * HOUR)}, ${iso(dayStart - 3 * HOUR)})`)
  await db.execute(sql`insert into vault_prices values ('bench', ${iso(dayStart - 2 * HOUR)}, 1000000000000000000, 'sync'), ('bench', ${iso(dayStart + 6 * HOUR)}, 1000100000000000000, 'sync'), ('bench', ${iso(dayStart + 12 * HOUR)}, 1000100000000000000, 'settlement')`)
  await db.execute(sql`insert into vault_cycles (id, vault_id, kind, number, state, opened_at, closed_at, finished_at, price) values
    ('vcy_1', 'bench', 'deposit', 1, 'settled', ${iso(dayStart - 3 * HOUR)}, ${iso(dayStart - HOUR)}, ${iso(dayStart - HOUR)}, 1000000000000000000),
    ('vcy_2', 'bench', 'deposit', 2, 'settled', ${iso(dayStart - HOUR)}, ${iso(dayStart + 12 * HOUR)}, ${iso(dayStart + 12 * HOUR)}, 1000100000000000000),
    ('vcy_3', 'bench', 'redeem', 1, 'settled', ${iso(dayStart - 3 * HOUR)}, ${iso(dayStart + 12 * HOUR)}, ${iso(dayStart + 12 * HOUR)}, 1000100000000000000)`)
  const intents = (cycle: string, kind: string, from: number, to: number, shares: string, at: number) =>
    db.execute(sql`insert into vault_intents (id, org_id, account_id, vault_id, kind, mode, cycle_id, record_id, state, amount, fee, shares, payout, created_at, settled_at)
      select ${cycle} || '_' || n, 'org_bench', 'acct_' || lpad(n::text, 8, '0'), 'bench', ${kind}, 'cycle', ${cycle}, 'rec_' || ${cycle} || '_' || n, 'settled', 1000000000, 0, ${sql.raw(shares)}, 'direct', ${iso(at)}::timestamptz, ${iso(at)}::timestamptz
      from generate_series(${from}::int, ${to}::int) n`)
  await intents('vcy_1', 'deposit', 1, POSITIONS, '1000000000 + n', dayStart - HOUR)
  await intents('vcy_2', 'deposit', 1, changed, '250000000', dayStart + 12 * HOUR)
  await intents('vcy_3', 'redeem', changed + 1, 2 * changed, '500000000', dayStart + 12 * HOUR)
  await db.execute(sql`analyze`)

  const clock = new VaultClock(db, () => dayStart + 2 * 86_400_000)
  const vaults = new VaultCatalog({ db, clock, venue: new SandboxVenue(db) })
  // Accruals never touch the ledger's balances: the figures come from settled intents and prices.
  const accruals = new Accruals({ db, ledger: undefined as unknown as Ledger, vaults })
  const compute = await measured(() => accruals.computeDay('bench', DAY))
  const rows = compute.result
  const [written] = await queryRows<{ n: string }>(db, sql`select count(*)::text as n from vault_accruals`)

  await db.execute(sql`create table vault_accruals_plain (like vault_accruals including all)`)
  const plain = await measured(() =>
    db.transaction(async (tx) => {
      for (let start = 0; start < rows.length; start += 5_000) await insertAccrualRows(tx, 'vault_accruals_plain', rows.slice(start, start + 5_000), '')
    }),
  )
  const [check] = await queryRows<{ same: boolean }>(db, sql`select (select count(*) from vault_accruals_plain) = (select count(*) from vault_accruals where day = ${DAY}::date) as same`)

  console.log(`accruals for one day, ${POSITIONS.toLocaleString('en')} positions (${changed.toLocaleString('en')} buying and ${changed.toLocaleString('en')} redeeming during the day), Postgres ${handle.kind === 'postgres' ? 'server' : 'embedded'}`)
  console.log(`  compute + write: ${compute.ms.toFixed(0)} ms, ${written!.n} rows, peak RSS ${compute.peakRssMb.toFixed(0)} MB`)
  console.log(`  plain insert:    ${plain.ms.toFixed(0)} ms, same rows: ${check!.same}, peak RSS ${plain.peakRssMb.toFixed(0)} MB`)
  console.log(`  ratio: ${(compute.ms / plain.ms).toFixed(2)}x`)
} finally {
  await handle.close()
  await database.drop()
}
