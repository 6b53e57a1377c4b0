import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createTestDatabase, onPostgres, type TestDatabase } from '../support/db.ts'
import { jsonClient, startServerProcess, type ServerProcess } from '../support/server-process.ts'

const OPERATOR_TOKEN = 'crash-test-operator-token-0123456789abcdef'
const ACCOUNTS = 40
/** A fresh embedded database on disk is created and migrated at the first start, which a busy machine takes long over. */
const START_TIMEOUT_MS = 120_000

let database: TestDatabase | undefined
let dataDir: string | undefined
let server: ServerProcess | undefined

afterAll(async () => {
  await server?.kill9()
  await database?.drop()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
})

async function allEvents(send: ReturnType<typeof jsonClient>, type: string): Promise<any[]> {
  const events: any[] = []
  let after: string | undefined
  for (;;) {
    const page = await send('GET', `/v1/events?types=${type}&limit=200${after ? `&after=${after}` : ''}`)
    events.push(...page.body.events)
    if (!page.body.hasMore) return events
    after = events.at(-1)!.id
  }
}

test(`a settlement killed mid-transaction leaves the cycle untouched; settling after the restart settles every intent exactly once (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  const env: Record<string, string> = { OPERATOR_TOKEN, EARNING_WORKER_INTERVAL_MS: '0' }
  if (onPostgres) {
    database = await createTestDatabase()
    env.DATABASE_URL = database.databaseUrl!
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'kassa-settle-crash-'))
    env.DATA_DIR = dataDir
  }
  // The first server dies by SIGKILL inside the settlement's transaction, its intents already moved in it.
  server = await startServerProcess({ ...env, KASSA_TEST_CRASH_POINT: 'cycle-settlement' }, { startTimeoutMs: START_TIMEOUT_MS })
  const base = () => server!.baseUrl
  const ops = jsonClient(base, OPERATOR_TOKEN)
  const org = (await ops('POST', '/ops/v1/orgs', { name: 'Settle crash' })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  await ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 10_000_000 })
  const send = jsonClient(base, key)
  expect((await ops('POST', '/ops/v1/vaults', { vaultId: 'crash', name: 'Crash', asset: 'USDC', minSubscription: '1', minRedemption: '1', initialPrice: '1.5' })).status).toBe(201)
  const intents: Array<{ id: string; accountId: string; amount: string }> = []
  for (let index = 0; index < ACCOUNTS; index++) {
    const accountId = (await send('POST', '/v1/accounts', { externalId: `holder-${index}` })).body.id
    expect((await send('POST', `/v1/sandbox/accounts/${accountId}/fund`, { asset: 'USDC', amount: '100' })).status).toBe(201)
    // Every fourth account subscribes twice.
    for (const amount of index % 4 === 0 ? ['10', '2.5'] : ['10']) {
      const response = await send('POST', '/v1/subscriptions', { accountId, vaultId: 'crash', amount })
      expect(response.status).toBe(201)
      intents.push({ id: response.body.id, accountId, amount })
    }
  }
  const cycle = (await ops('GET', '/ops/v1/vaults/crash/cycles')).body.cycles.find((row: any) => row.cycleKind === 'deposit' && row.state === 'open')
  const killed = await ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`).then(
    () => false,
    () => true,
  )
  expect(killed).toBe(true)
  await server.child.exited
  expect(server.child.signalCode).toBe('SIGKILL')

  server = await startServerProcess(env, { startTimeoutMs: START_TIMEOUT_MS })
  // Untouched: the close had committed before the settlement began, nothing of the settlement did.
  const after = (await ops('GET', '/ops/v1/vaults/crash/cycles')).body.cycles.find((row: any) => row.cycleId === cycle.cycleId)
  expect(after.state).toBe('closed')
  for (const intent of intents) expect((await send('GET', `/v1/subscriptions/${intent.id}`)).body.state).toBe('confirmed')
  expect(await allEvents(send, 'transaction.deposit.settled')).toEqual([])
  const sample = (await send('GET', `/v1/accounts/${intents[0]!.accountId}/balances`)).body.balances.find((row: any) => row.asset === 'USDC')
  expect(sample).toMatchObject({ available: '87.500000', inFlight: '12.500000', allocations: [] })
  expect((await ops('GET', '/ops/v1/ledger/verify')).body.problems).toEqual([])

  // Settled again: every intent exactly once, at the cycle's one price (1.5), rounded down.
  const settled = await ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
  expect(settled.body).toMatchObject({ state: 'settled', intents: intents.length, sharePrice: '1.500000' })
  const again = await ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
  expect(again.body).toEqual(settled.body)
  const events = await allEvents(send, 'transaction.deposit.settled')
  expect(events.map((event) => event.data.intentId).sort()).toEqual(intents.map((intent) => intent.id).sort())
  const expectedShares = (amount: string) => ((BigInt(Math.round(Number(amount) * 1e6)) * 10n ** 18n) / 1_500_000_000_000_000_000n).toString()
  for (const intent of intents) {
    const read = (await send('GET', `/v1/subscriptions/${intent.id}`)).body
    expect(read.state).toBe('settled')
    expect(read.shares.replace('.', '').replace(/^0+/, '')).toBe(expectedShares(intent.amount))
  }
  const holder = (await send('GET', `/v1/accounts/${intents[0]!.accountId}/balances`)).body.balances.find((row: any) => row.asset === 'USDC')
  // Two intents, each rounded down: 6.666666 + 1.666666 shares.
  expect(holder).toMatchObject({ inFlight: '0.000000', allocations: [{ vaultId: 'crash', shares: '8.333332', value: '12.499998' }] })
  const report = (await ops('GET', '/ops/v1/ledger/verify')).body
  expect(report.problems).toEqual([])
  expect(report.ok).toBe(true)
  await server.stop()
}, 240_000)
