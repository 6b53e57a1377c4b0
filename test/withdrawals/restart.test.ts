import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { openDatabase, queryRows } from '../../db/client.ts'
import { createTestDatabase, onPostgres, type TestDatabase } from '../support/db.ts'
import { DAY_SECONDS, TRON_DESTINATION } from './support.ts'
import { startServerProcess } from '../support/server-process.ts'
import { eventually } from '../support/eventually.ts'

const OPERATOR_TOKEN = 'withdrawal-restart-operator-token-0123456789'

let database: TestDatabase | undefined
let dataDir: string | undefined
let server: Bun.Subprocess | undefined

afterAll(async () => {
  server?.kill(9)
  await server?.exited
  await database?.drop()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
})

/** Starts the real server (`bun server/main.ts`) and answers its base URL once it listens. */
async function startServer(env: Record<string, string>): Promise<string> {
  const started = await startServerProcess({ OPERATOR_TOKEN, ...env })
  server = started.child
  return started.baseUrl
}

/** kill -9: no shutdown hook runs, whatever was in memory is gone. */
async function crash(): Promise<void> {
  server!.kill(9)
  await server!.exited
}

type Answer = { status: number; body: any }

async function send(base: string, method: string, path: string, authorization: string, body?: unknown): Promise<Answer> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${authorization}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { status: response.status, body: await response.json() }
}

async function waitFor(read: () => Promise<Answer>, state: string): Promise<any> {
  return (await eventually(read, { what: `the state ${state}`, timeoutMs: 10_000, intervalMs: 20, accept: (last) => last.body.state === state })).body
}

test(`a withdrawal survives kill -9 at every stage and ends in exactly one terminal state (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  const env: Record<string, string> = {}
  if (onPostgres) {
    database = await createTestDatabase()
    env.DATABASE_URL = database.databaseUrl!
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'kassa-withdrawal-restart-'))
    env.DATA_DIR = dataDir
  }
  let base = await startServer(env)
  const ops = (method: string, path: string, body?: unknown) => send(base, method, `/ops/v1${path}`, OPERATOR_TOKEN, body)
  const org = (await ops('POST', '/orgs', { name: 'Restart' })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  const second = (await ops('POST', `/orgs/${org.id}/keys`, { type: 'test', environment: 'sandbox' })).body.key as string
  expect((await ops('PUT', `/orgs/${org.id}/withdrawal-approval`, { asset: 'USDT', threshold: '0' })).status).toBe(200)
  const call = (method: string, path: string, body?: unknown, as = key) => send(base, method, path, as, body)
  const account = (await call('POST', '/v1/accounts', { externalId: 'restarted' })).body.id as string
  expect((await call('POST', `/v1/sandbox/accounts/${account}/fund`, { asset: 'USDT', amount: '1000' })).status).toBe(201)
  const entry = (await call('POST', `/v1/accounts/${account}/allowlist`, { network: 'tron', address: TRON_DESTINATION })).body.id as string
  expect((await call('POST', '/v1/sandbox/clock/advance', { seconds: DAY_SECONDS })).status).toBe(200)
  expect((await call('GET', `/v1/allowlist/${entry}`)).body.state).toBe('active')

  const withdraw = async (amount: string) => {
    const quoteId = (await call('POST', '/v1/quotes', { kind: 'withdrawal', accountId: account, asset: 'USDT', amount })).body.id
    const created = await call('POST', '/v1/withdrawals', { accountId: account, allowlistEntryId: entry, quoteId })
    expect(created.status).toBe(201)
    expect(created.body.state).toBe('pending_approval')
    return created.body
  }
  const read = (id: string) => () => call('GET', `/v1/withdrawals/${id}`)
  const balance = async () => (await call('GET', `/v1/accounts/${account}/balances`)).body.balances.find((entry: { asset: string }) => entry.asset === 'USDT')
  const verify = async () => {
    const report = (await ops('GET', '/ledger/verify')).body
    expect(report.problems).toEqual([])
    expect(report.ok).toBe(true)
  }

  // 1. Killed while pending approval: after the restart it is still pending and its money still in flight.
  const first = await withdraw('100')
  expect(first.totalDebited).toBe('101.150000')
  await crash()
  base = await startServer(env)
  expect((await read(first.id)()).body.state).toBe('pending_approval')
  expect(await balance()).toMatchObject({ total: '1000.000000', available: '898.850000', inFlight: '101.150000' })
  await verify()

  // 2. Approved by the second key and broadcast, then killed before finality.
  expect((await call('POST', `/v1/withdrawals/${first.id}/approve`, undefined, second)).status).toBe(200)
  const submitted = await waitFor(read(first.id), 'submitted')
  await crash()
  base = await startServer(env)
  expect((await read(first.id)()).body).toMatchObject({ state: 'submitted', txHash: submitted.txHash })
  await verify()

  // 3. Approved and killed at once (the broadcast may or may not have happened): the restarted server broadcasts it.
  const secondWithdrawal = await withdraw('50')
  expect((await call('POST', `/v1/withdrawals/${secondWithdrawal.id}/approve`, undefined, second)).status).toBe(200)
  await crash()
  base = await startServer(env)
  await waitFor(read(secondWithdrawal.id), 'submitted')

  // 4. Made to fail on chain, then killed before the failure is final.
  const third = await withdraw('20')
  expect((await call('POST', `/v1/withdrawals/${third.id}/approve`, undefined, second)).status).toBe(200)
  await waitFor(read(third.id), 'submitted')
  expect((await call('POST', `/v1/sandbox/chain/withdrawals/${third.id}/fail`, { reason: 'reverted' })).status).toBe(200)
  await crash()
  base = await startServer(env)

  // Finality: Tron needs 19 blocks of 3 s on the organization's clock.
  expect((await call('POST', '/v1/sandbox/clock/advance', { seconds: 120 })).status).toBe(200)
  const completedFirst = await waitFor(read(first.id), 'confirmed')
  expect(completedFirst.chainEvidence).toMatchObject({ txHash: submitted.txHash, network: 'tron', confirmations: 19 })
  await waitFor(read(secondWithdrawal.id), 'confirmed')
  const failedThird = await waitFor(read(third.id), 'failed')
  expect(failedThird.failureReason).toBe('reverted')

  // One more restart: outcomes delivered again must not move money twice.
  await crash()
  base = await startServer(env)
  await Bun.sleep(500)
  expect((await call('POST', '/v1/sandbox/clock/advance', { seconds: 60 })).status).toBe(200)
  for (const [id, state] of [
    [first.id, 'confirmed'],
    [secondWithdrawal.id, 'confirmed'],
    [third.id, 'failed'],
  ] as const) {
    expect((await read(id)()).body.state).toBe(state)
  }
  // 1000 - 101.15 (100 + 1 network + 0.15 service) - 51.075 (50 + 1 + 0.075); the failed 20 came back.
  expect(await balance()).toMatchObject({ total: '847.775000', available: '847.775000', inFlight: '0.000000' })
  await verify()
  await crash()

  // Read the database the server left behind: one terminal event per withdrawal, two movements each.
  const handle = await openDatabase({ databaseUrl: env.DATABASE_URL, embeddedPath: join(dataDir ?? '', 'pglite'), poolMax: 1 })
  try {
    const events = await queryRows<{ type: string; id: string }>(
      handle.db,
      sql`select type, data->>'id' as id from events where org_id = ${org.id} and type like 'treasury.withdrawal.%' order by seq`,
    )
    const terminal = events.filter((event) => /completed|failed|rejected|confirmed/.test(event.type)).map((event) => `${event.id} ${event.type}`)
    expect(terminal.sort()).toEqual(
      [`${first.id} treasury.withdrawal.completed`, `${secondWithdrawal.id} treasury.withdrawal.completed`, `${third.id} treasury.withdrawal.failed`].sort(),
    )
    const movements = await queryRows<{ reference: string; kind: string }>(
      handle.db,
      sql`select reference, kind from ledger_movements where reference in (${first.id}, ${secondWithdrawal.id}, ${third.id}) order by reference, kind`,
    )
    expect(movements.map((movement) => `${movement.reference} ${movement.kind}`).sort()).toEqual(
      [
        `${first.id} withdrawal_complete`,
        `${first.id} withdrawal_reserve`,
        `${secondWithdrawal.id} withdrawal_complete`,
        `${secondWithdrawal.id} withdrawal_reserve`,
        `${third.id} withdrawal_fail`,
        `${third.id} withdrawal_reserve`,
      ].sort(),
    )
  } finally {
    await handle.close()
  }
}, 240_000)
