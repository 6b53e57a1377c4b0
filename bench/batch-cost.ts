/**
 * What one ledger batch costs Postgres itself. Figures only: nothing here passes or fails.
 *
 * It authorizes one payment on each of BATCH_COST_OPERATIONS accounts at once through the real app
 * (on a throwaway Postgres database), keeps the largest batch statement the writer built, and replays
 * it (fresh ids, the order guard moved on each time) one at a time on one connection, reading that
 * backend's CPU time from /proc. It prints the Postgres CPU per batch and per authorization for the
 * whole statement, for the statement with one table's rows left out at a time (what each table
 * costs), and for parsing its JSON parameters alone (one per table); and, for scale, what a one-row
 * select and a one-row committed insert cost the same backend.
 *
 *   ./node_modules/.bin/bun bench/batch-cost.ts     (BATCH_COST_OPERATIONS, default 50; BATCH_COST_ROUNDS, default 300;
 *                                                  BATCH_COST_PLANNER=default: Postgres' planner defaults, not the writer's)
 *
 * Needs Postgres on this host (the backend's /proc entry).
 */
import postgres from 'postgres'
import { createApp } from '../server/app.ts'
import { configForTests } from '../test/support/config.ts'
import { WRITER_PLANNER } from '../db/client.ts'
import type { TextStatement } from '../db/bulk.ts'
import { createBenchDatabase, processCpuMs } from './support.ts'

const OPERATIONS = Number(process.env.BATCH_COST_OPERATIONS ?? 50)
const ROUNDS = Number(process.env.BATCH_COST_ROUNDS ?? 300)

const database = await createBenchDatabase('batch_cost')
const kassa = await createApp(configForTests({ databaseUrl: database.url, rateLimitStore: 'memory' }))

// The statements the writer builds, as text and parameters. Each parameter is the JSON of one part,
// named here by the CTE that reads it (`d` reads the balances).
const captured: Array<{ text: string; parts: Record<string, string> }> = []
const writer = kassa.runtime.ledger.writer as unknown as { batchStatement(flight: unknown): TextStatement }
const build = writer.batchStatement.bind(writer)
writer.batchStatement = (flight: unknown) => {
  const statement = build(flight)
  const parts: Record<string, string> = {}
  statement.params.forEach((value, index) => {
    const at = statement.text.indexOf(`$${index + 1}::jsonb`)
    const reader = [...statement.text.slice(0, at).matchAll(/(\w+) as \(/g)].at(-1)?.[1] ?? 'input'
    parts[reader === 'd' ? 'balances' : reader] = value
  })
  captured.push({ text: statement.text, parts })
  return statement
}

async function call(path: string, method: string, token: string, body?: unknown): Promise<any> {
  const request = new Request(`http://kassa.bench${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
  return (await kassa.app.handle(request)).json()
}

const org = await call('/ops/v1/orgs', 'POST', kassa.runtime.operatorToken, { name: 'Batch Cost' })
const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
await call(`/ops/v1/orgs/${org.id}/limits`, 'PATCH', kassa.runtime.operatorToken, { rateLimitPerMinute: 10_000_000 })
const accounts: string[] = []
for (let index = 0; index < OPERATIONS; index++) {
  const account = await call('/v1/accounts', 'POST', key, { externalId: `batch-${index}` })
  await call(`/v1/sandbox/accounts/${account.id}/fund`, 'POST', key, { asset: 'USDC', amount: '1000000' })
  accounts.push(account.id)
}
await kassa.runtime.ledger.drain()
captured.length = 0
await Promise.all(accounts.map((account) => call('/v1/payments/authorize', 'POST', key, { accountId: account, asset: 'USDC', amount: '1.00' })))
const size = (entry: { parts: Record<string, string> }) => Object.values(entry.parts).reduce((sum, text) => sum + text.length, 0)
const largest = captured.sort((a, b) => size(b) - size(a))[0]!
const names = Object.keys(largest.parts)
const document = Object.fromEntries(names.map((name) => [name, JSON.parse(largest.parts[name]!)])) as Record<string, unknown>
// One payment per authorization (its row also records the reservation's movement: no movement
// rows), created by the batch: the writer's `authorizations` part.
const operations = (document.authorizations as unknown[]).length
await kassa.close()

// The planner settings of the writer's own connection, as the writer runs it (BATCH_COST_PLANNER=default for Postgres' defaults).
const planner = process.env.BATCH_COST_PLANNER === 'default' ? {} : WRITER_PLANNER
const sql = postgres(database.url, { max: 1, onnotice: () => {}, connection: planner })
// The parameters go as jsonb text, as drizzle sends them (postgres.js would otherwise encode them again).
;(sql as unknown as { options: { serializers: Record<string, (value: unknown) => unknown> } }).options.serializers['3802'] = (value) => value
const [{ pid }] = (await sql`select pg_backend_pid() as pid`) as unknown as [{ pid: number }]
const backendCpuMs = () => processCpuMs(pid)

const writerId = `wr_batch_cost_${Date.now()}`
let seq = 0
async function replay(rounds: number, base: Record<string, unknown>): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    seq += 1
    const input = { ...(base.input as Record<string, unknown>), writer: writerId, seq, prev: seq - 1 }
    const texts = names.map((name) => (name === 'input' ? JSON.stringify(input) : JSON.stringify(base[name]).replace(/"((?:mv|hold|pay|evt)_[0-9a-f]{32})"/g, `"$1r${seq}"`)))
    await sql.unsafe(largest.text, texts, { prepare: true })
  }
}

async function measure(label: string, run: () => Promise<void>): Promise<void> {
  const cpuBefore = backendCpuMs()
  const started = performance.now()
  await run()
  const wallMs = performance.now() - started
  const cpuMs = backendCpuMs() - cpuBefore
  console.log(`${label.padEnd(34)} wall ${(wallMs / ROUNDS).toFixed(3)} ms/batch | Postgres CPU ${(cpuMs / ROUNDS).toFixed(3)} ms/batch = ${((cpuMs * 1000) / ROUNDS / operations).toFixed(1)} µs per authorization`)
}

/**
 * What any statement costs this Postgres, for scale: a prepared one-row select (the round trip and
 * the backend waking for it) and a prepared one-row insert committing by itself (that, plus a commit
 * and its flush). A batch can cost no less than the second.
 */
async function measureFloor(label: string, run: (round: number) => Promise<unknown>): Promise<void> {
  for (let round = 0; round < 20; round++) await run(-round - 1)
  const cpuBefore = backendCpuMs()
  const started = performance.now()
  for (let round = 0; round < ROUNDS; round++) await run(round)
  const wallMs = performance.now() - started
  console.log(`${label.padEnd(34)} wall ${(wallMs / ROUNDS).toFixed(3)} ms/statement | Postgres CPU ${((backendCpuMs() - cpuBefore) / ROUNDS).toFixed(3)} ms/statement`)
}

console.log(`batch of ${operations} authorizations, JSON parameters ${size(largest)} bytes, ${ROUNDS} rounds each`)
await sql.unsafe('create table batch_cost_floor (id text primary key, amount numeric(38, 0) not null)')
await measureFloor('floor: one-row select', () => sql.unsafe('select $1::int as one', [1], { prepare: true }))
await measureFloor('floor: one-row insert, committed', (round) => sql.unsafe('insert into batch_cost_floor (id, amount) values ($1, 1)', [`floor_${round}`], { prepare: true }))
await replay(20, document)
const parseAll = `select ${names.map((_, index) => `length($${index + 1}::jsonb::text)`).join(' + ')}`
await measure('JSON parameters parsed alone', async () => {
  for (let round = 0; round < ROUNDS; round++) await sql.unsafe(parseAll, names.map((name) => largest.parts[name]!), { prepare: true })
})
await measure('whole batch statement', () => replay(ROUNDS, document))
for (const part of ['movements', 'balances', 'holds', 'authorizations', 'payments', 'events'].filter((name) => name in document)) {
  await measure(`without ${part}`, () => replay(ROUNDS, { ...document, [part]: [] }))
}
await measure('order guard alone (no rows)', () => replay(ROUNDS, Object.fromEntries(Object.entries(document).map(([name, value]) => [name, name === 'input' ? value : []]))))
await sql.end()
await database.drop()
