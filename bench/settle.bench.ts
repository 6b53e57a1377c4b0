/**
 * A deposit cycle's settlement at scale, beside a plain bulk insert of as many rows, and the
 * authorization latency while it runs. Figures only: nothing here passes or fails.
 *
 * On a throwaway Postgres database (DATABASE_URL or the local default), in process: an organization,
 * a vault (price 1.25) and SETTLE_INTENTS accounts (default 100,000), each with one confirmed 10 USDC
 * subscription in the vault's deposit cycle, seeded in SQL (accounts, one funding movement that puts
 * each amount in the account's inFlight, balances, intents) so the ledger verifies; the cycle is
 * closed through the operator API. Then:
 *   1. plain: one `insert ... select from jsonb_populate_recordset` of SETTLE_INTENTS rows shaped like
 *      the intents into a table of their own (what writing as many rows costs at the least);
 *   2. authorizations alone: AUTH_CONCURRENCY (default 8) in-process authorizations in flight for
 *      AUTH_BASELINE_MS (default 3000), their latency percentiles;
 *   3. the settlement (`Cycles.settle`: read the intents, plan, one transaction through the ledger
 *      with every intent's row, every balance, the movement and an event per intent), timed, with the
 *      same authorization load running beside it for its whole length;
 *   4. ledger verify over the result.
 * Prints settle ms, plain ms, their ratio, and authorization p50/p99 without and during the settlement.
 *
 *   ./node_modules/.bin/bun bench/settle.bench.ts
 */
import postgres from 'postgres'
import { sql } from 'drizzle-orm'
import { queryRows } from '../db/client.ts'
import { createApp } from '../server/app.ts'
import { configForTests } from '../test/support/config.ts'
import { verifyLedger } from '../server/ledger/verify.ts'
import { createBenchDatabase, inProcessFundedOrg, percentile, round2 } from './support.ts'

const INTENTS = Number(process.env.SETTLE_INTENTS ?? 100_000)
const CONCURRENCY = Number(process.env.AUTH_CONCURRENCY ?? 8)
const BASELINE_MS = Number(process.env.AUTH_BASELINE_MS ?? 3000)
const AMOUNT_MINOR = 10_000_000n

const database = await createBenchDatabase('settle')
const kassa = await createApp(configForTests({ databaseUrl: database.url, rateLimitStore: 'memory' }))
try {
  const payer = await inProcessFundedOrg(kassa, 16, '100000')
  const ops = async (method: string, path: string, body?: unknown) => {
    const response = await kassa.handle(
      new Request(`http://kassa.bench${path}`, { method, headers: { authorization: `Bearer ${kassa.runtime.operatorToken}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }),
    )
    if (response.status >= 300) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`)
    return response.json() as Promise<any>
  }
  await ops('POST', '/ops/v1/vaults', { vaultId: 'bench', name: 'Bench', asset: 'USDC', minSubscription: '1', minRedemption: '1', initialPrice: '1.25' })
  const cycle = (await ops('GET', '/ops/v1/vaults/bench/cycles')).cycles.find((row: any) => row.cycleKind === 'deposit' && row.state === 'open')
  const orgId = payer.orgId
  const seedStarted = performance.now()
  const admin = postgres(database.url, { max: 1, onnotice: () => {} })
  await admin.begin(async (tx) => {
    await tx.unsafe(`create temporary table seed on commit drop as
      select n, 'acct_bench' || lpad(n::text, 26, '0') as account_id, 'txi_bench' || lpad(n::text, 27, '0') as intent_id
      from generate_series(1, ${INTENTS}) as n`)
    await tx.unsafe(`insert into accounts (id, org_id, external_id, type, status, metadata, created_at)
      select account_id, '${orgId}', 'holder-' || n, 'individual', 'active', '{}'::jsonb, now() from seed`)
    await tx.unsafe(`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
      select 'mv_benchseed', '${orgId}', 'bench_seed', 'bench_seed', now(),
        array['system:faucet'] || array_agg(account_id order by n), array['available'] || array_agg('in_flight'::text order by n),
        array['USDC'] || array_agg('USDC'::text order by n), array[${-AMOUNT_MINOR * BigInt(INTENTS)}::numeric] || array_agg(${AMOUNT_MINOR}::numeric order by n)
      from seed`)
    await tx.unsafe(`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
      select '${orgId}', account_id, 'USDC', 'customer', 0, 0, ${AMOUNT_MINOR}, ${AMOUNT_MINOR}, now() from seed`)
    await tx.unsafe(`update ledger_balances set available = available - ${AMOUNT_MINOR * BigInt(INTENTS)}, total = total - ${AMOUNT_MINOR * BigInt(INTENTS)}
      where org_id = '${orgId}' and account_id = 'system:faucet' and asset = 'USDC'`)
    await tx.unsafe(`insert into vault_intents (id, org_id, account_id, vault_id, kind, mode, cycle_id, record_id, state, amount, fee, created_at)
      select intent_id, '${orgId}', account_id, 'bench', 'deposit', 'cycle', '${cycle.cycleId}', 'rec_bench' || n, 'confirmed', ${AMOUNT_MINOR}, 0, now() from seed`)
  })
  await kassa.runtime.ledger.load()
  await ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/close`)
  console.log(`seeded ${INTENTS} accounts and intents in ${Math.round(performance.now() - seedStarted)} ms`)

  // 1. The floor: as many rows, shaped like the intents, in one plain bulk insert.
  await admin.unsafe('create table bench_plain (like vault_intents including all)')
  const rows = Array.from({ length: INTENTS }, (_, index) => ({
    id: `txi_plain${index.toString().padStart(27, '0')}`,
    org_id: orgId,
    account_id: `acct_bench${index.toString().padStart(26, '0')}`,
    vault_id: 'bench',
    kind: 'deposit',
    mode: 'cycle',
    cycle_id: cycle.cycleId,
    record_id: `rec_plain${index}`,
    state: 'settled',
    amount: AMOUNT_MINOR.toString(),
    fee: '0',
    shares: '8000000',
    created_at: new Date().toISOString(),
  }))
  const plainStarted = performance.now()
  await admin.unsafe('insert into bench_plain select * from jsonb_populate_recordset(null::bench_plain, $1::text::jsonb)', [JSON.stringify(rows)])
  const plainMs = performance.now() - plainStarted

  // 2. and 3. Authorizations alone, then beside the settlement.
  let sequence = 0
  /** Authorizations approved (state authorized) and declined, per phase. */
  const outcomes = { alone: { authorized: 0, declined: 0 }, during: { authorized: 0, declined: 0 } }
  let phase: keyof typeof outcomes = 'alone'
  let lastDecline: string | undefined
  const authorize = async (): Promise<number> => {
    const accountId = payer.accounts[sequence++ % payer.accounts.length]!
    const started = performance.now()
    const response = await kassa.handle(
      new Request('http://kassa.bench/v1/payments/authorize', {
        method: 'POST',
        headers: { authorization: `Bearer ${payer.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ accountId, asset: 'USDC', amount: '1.25', merchant: { name: 'Coffee', mcc: '5814' } }),
      }),
    )
    const answer = (await response.json()) as { state?: string; failureCode?: string; error?: { code: string } }
    if (answer.state !== 'authorized') lastDecline = answer.failureCode ?? answer.error?.code
    const elapsed = performance.now() - started
    if (answer.state === 'authorized') outcomes[phase].authorized += 1
    else outcomes[phase].declined += 1
    return elapsed
  }
  const load = async (until: () => boolean): Promise<number[]> => {
    const latencies: number[] = []
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (!until()) {
          latencies.push(await authorize())
          // An authorization declined from memory answers without waiting on anything: yield to
          // the event loop, or this loop would keep the settlement's own I/O from ever running.
          await new Promise((resolve) => setImmediate(resolve))
        }
      }),
    )
    return latencies.sort((a, b) => a - b)
  }
  const baselineEnd = performance.now() + BASELINE_MS
  const alone = await load(() => performance.now() >= baselineEnd)
  let settling = true
  phase = 'during'
  const during = load(() => !settling)
  const settleStarted = performance.now()
  const settled = await kassa.earning!.cycles.settle(cycle.cycleId)
  const settleMs = performance.now() - settleStarted
  settling = false
  const beside = await during
  const report = await verifyLedger(kassa.runtime.db, kassa.runtime.ledger.journalSources)
  const [count] = await queryRows<{ count: string }>(kassa.runtime.db, sql`select count(*)::text as count from vault_intents where cycle_id = ${cycle.cycleId} and state = 'settled'`)
  await admin.end()
  const figures = {
    intents: INTENTS,
    settledIntents: Number(count!.count),
    cycleState: settled.state,
    settleMs: Math.round(settleMs),
    plainInsertMs: Math.round(plainMs),
    ratio: round2(settleMs / plainMs),
    authorizations: {
      outcomes,
      lastDecline,
      alone: { count: alone.length, p50Ms: round2(percentile(alone, 0.5)), p99Ms: round2(percentile(alone, 0.99)) },
      duringSettlement: { count: beside.length, p50Ms: round2(percentile(beside, 0.5)), p99Ms: round2(percentile(beside, 0.99)) },
      p99Ratio: round2(percentile(beside, 0.99) / percentile(alone, 0.99)),
    },
    verify: { ok: report.ok, problems: report.problems.length },
  }
  console.log(JSON.stringify(figures, null, 2))
} finally {
  await kassa.close()
  await database.drop()
}
