/**
 * SBT data API benchmark: a real server process on Postgres with BENCH_SBT_USERS users (1,000,000
 * by default) and five rows per user of credential results and claim records (4 results and 1
 * claim record each; 5,000,000 at full scale), generated with set-based SQL (generate_series).
 * `GET /gonative/user` and `GET /gonative/all-users` are then driven closed-loop over HTTP by
 * BENCH_CLIENTS clients for BENCH_DURATION_MS each, and beside each, in the same run, a plain indexed
 * SELECT of the same row or page straight from postgres.js with as many clients; the p99s are
 * printed with their ratio (the target: within 2×). Nothing here passes or fails.
 *
 *   BENCH_SBT_USERS=200000 bun bench/sbt.bench.ts
 */
import postgres from 'postgres'
import { createBenchDatabase, OPERATOR_TOKEN, percentile, round2, startServer, writeResults } from './support.ts'

const USERS = Number(process.env.BENCH_SBT_USERS ?? 1_000_000)
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 8)
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 6000)
const PAGE_SIZE = 20
/** all-users pages are drawn from the first this many (an OFFSET deeper than that costs both sides alike). */
const PAGES_DRAWN_MAX = 5000
const REWARDS = 20
const CREDENTIALS = 8

function addressOf(index: number): string {
  return `0x${index.toString(16).padStart(64, '0')}`
}

function randomInt(maxInclusive: number): number {
  return 1 + Math.floor(Math.random() * maxInclusive)
}

interface Figures {
  samples: number
  perSecond: number
  p50Ms: number
  p99Ms: number
  maxMs: number
}

async function closedLoop(clients: number, durationMs: number, once: () => Promise<void>): Promise<Figures> {
  const latencies: number[] = []
  const end = performance.now() + durationMs
  const started = performance.now()
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) {
        const at = performance.now()
        await once()
        latencies.push(performance.now() - at)
      }
    }),
  )
  const ranMs = performance.now() - started
  latencies.sort((a, b) => a - b)
  return { samples: latencies.length, perSecond: round2((latencies.length * 1000) / ranMs), p50Ms: round2(percentile(latencies, 0.5)), p99Ms: round2(percentile(latencies, 0.99)), maxMs: round2(latencies.at(-1) ?? 0) }
}

async function generate(sql: postgres.Sql): Promise<void> {
  const started = performance.now()
  await sql`insert into sbt_campaigns (id, name, is_default) values ('bench', 'Bench', 1)`
  await sql`insert into sbt_credential_groups (id, campaign_id, name) select 'g' || g, 'bench', 'Group ' || g from generate_series(1, ${REWARDS}) g`
  await sql`insert into sbt_credentials (id, group_id, name, label_type) select 'cred' || c, 'g' || (1 + c % ${REWARDS}), 'Credential ' || c, 20 from generate_series(1, ${CREDENTIALS}) c`
  await sql`
    insert into sbt_rewards (sbt_id, kind, group_id, level, title, task_name, points, invites_required, usd_required)
    select r, (array['social', 'referral', 'lockdrop'])[1 + r % 3], 'g' || r, 1 + r % 10, 'SBT ' || r, 'Task ' || r, 10 * r,
           case when r % 3 = 1 then 1 + r % 5 end, case when r % 3 = 2 then 100 * r end
    from generate_series(1, ${REWARDS}) r`
  // Every tenth user invited by an earlier one: invitees lists of about ten.
  await sql`
    insert into sbt_users (id, sui_address, invite_code, invited_by, invited_at, created_at)
    select i, '0x' || lpad(to_hex(i), 64, '0'), 'code' || i,
           case when i > 10 then i / 10 end, case when i > 10 then timestamptz '2026-01-01' + i * interval '1 second' end,
           timestamptz '2026-01-01' + i * interval '1 second'
    from generate_series(1, ${USERS}) i`
  await sql`select setval('sbt_users_id_seq', ${USERS})`
  console.error(`users: ${Math.round(performance.now() - started)} ms`)
  // Four results per user, one of them a duplicate of another (the contract allows duplicates).
  await sql`
    insert into sbt_credential_results (user_id, credential_id, status)
    select u, 'cred' || (1 + (u + k) % ${CREDENTIALS}), case when k = 3 then 1 else (u + k) % 2 end
    from generate_series(1, ${USERS}) u, generate_series(0, 3) k`
  console.error(`results: ${Math.round(performance.now() - started)} ms`)
  // One claim record per user, of one of the rewards; most claimed (4), the rest in other states.
  await sql`
    insert into sbt_claims (user_id, sbt_id, claim_type)
    select u, 1 + u % ${REWARDS}, case when u % 5 = 0 then 2 + u % 3 else 4 end
    from generate_series(1, ${USERS}) u`
  console.error(`claims: ${Math.round(performance.now() - started)} ms`)
  await sql`analyze`
  console.error(`generated in ${Math.round(performance.now() - started)} ms`)
}

async function main(): Promise<void> {
  const database = await createBenchDatabase('sbt')
  const sbtPort = 41000 + Math.floor(Math.random() * 10000)
  const server = await startServer({ ...database.serverEnv, SBT_PORT: String(sbtPort), WEBHOOK_DELIVERY: 'false', WARM_UP_AUTHORIZATIONS: '0' })
  const sql = postgres(database.url, { max: CLIENTS, onnotice: () => {} })
  try {
    await generate(sql)
    const issued = await fetch(`${server.base}/ops/v1/sbt/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ environment: 'staging', label: 'bench' }),
    })
    const token = ((await issued.json()) as { token: string }).token
    const sbtBase = `http://127.0.0.1:${sbtPort}`
    const [counted] = await sql`select (select count(*) from sbt_credential_results) + (select count(*) from sbt_claims) as rows`
    const pages = Math.min(PAGES_DRAWN_MAX, Math.ceil(USERS / PAGE_SIZE))
    const get = async (path: string) => {
      const response = await fetch(`${sbtBase}${path}`, { headers: { authorization: token } })
      const body = (await response.json()) as { code: number }
      if (response.status !== 200 || body.code !== 0) throw new Error(`${path}: ${response.status} ${JSON.stringify(body).slice(0, 200)}`)
    }
    // Warm both sides once before measuring.
    await closedLoop(CLIENTS, 1000, () => get(`/gonative/user?address=${addressOf(randomInt(USERS))}`))
    const runs = {
      user: await closedLoop(CLIENTS, DURATION_MS, () => get(`/gonative/user?address=${addressOf(randomInt(USERS))}`)),
      userSelect: await closedLoop(CLIENTS, DURATION_MS, async () => {
        await sql`select id, invite_code from sbt_users where sui_address = ${addressOf(randomInt(USERS))}`
      }),
      allUsers: await closedLoop(CLIENTS, DURATION_MS, () => get(`/gonative/all-users?page=${randomInt(pages)}&pageSize=${PAGE_SIZE}`)),
      allUsersSelect: await closedLoop(CLIENTS, DURATION_MS, async () => {
        await sql`select id, sui_address from sbt_users order by id limit ${PAGE_SIZE} offset ${(randomInt(pages) - 1) * PAGE_SIZE}`
      }),
    }
    const ratio = (api: Figures, plain: Figures) => round2(api.p99Ms / plain.p99Ms)
    const summary = {
      users: USERS,
      resultAndClaimRows: Number(counted!.rows),
      clients: CLIENTS,
      durationMs: DURATION_MS,
      pageSize: PAGE_SIZE,
      pagesDrawnFrom: pages,
      runs,
      p99Ratio: { user: ratio(runs.user, runs.userSelect), allUsers: ratio(runs.allUsers, runs.allUsersSelect) },
    }
    const line = (name: string, figures: Figures) => `| ${name} | ${figures.samples} | ${figures.perSecond} | ${figures.p50Ms} | ${figures.p99Ms} | ${figures.maxMs} |`
    const markdown = [
      `# SBT data API: ${USERS.toLocaleString('en')} users, ${summary.resultAndClaimRows.toLocaleString('en')} results and claim records`,
      '',
      `${CLIENTS} closed-loop clients, ${DURATION_MS} ms per run; all-users pages of ${PAGE_SIZE} drawn from the first ${pages}.`,
      '',
      '| run | requests | per second | p50 ms | p99 ms | max ms |',
      '|---|---|---|---|---|---|',
      line('GET /gonative/user (HTTP)', runs.user),
      line('plain indexed SELECT of the user', runs.userSelect),
      line('GET /gonative/all-users (HTTP)', runs.allUsers),
      line('plain indexed SELECT of the page', runs.allUsersSelect),
      '',
      `p99 ratio, API over plain SELECT: user ${summary.p99Ratio.user}×, all-users ${summary.p99Ratio.allUsers}× (target: within 2×)`,
      '',
    ].join('\n')
    console.log(markdown)
    console.error(`written to ${writeResults('sbt', summary, markdown)}`)
  } finally {
    await sql.end()
    await server.stop()
    await database.drop()
  }
}

await main()
