import { afterAll, beforeAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { createApp, type Kassa } from '../../server/app.ts'
import { configForTests } from '../support/config.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { txHash } from './support.ts'

const WALL_CLOCK_MS = Date.UTC(2030, 0, 1)

let app: TestApp
let fx: LedgerFixture
let second: Kassa

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => WALL_CLOCK_MS })
  fx = await ledgerFixture(app, 'Two Instances')
  second = await createApp(configForTests({ databaseUrl: app.config.databaseUrl }), { database: await app.database.open(), wallClockMs: () => WALL_CLOCK_MS })
  // Only explicit calls finalize in this file: both instances' background sweeps are stopped.
  for (const kassa of [app.kassa, second]) for (const stop of kassa.runtime.stoppers.splice(0)) await stop()
})
afterAll(async () => {
  await app.close()
})

async function viaSecond(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await second.app.handle(
    new Request(`http://kassa.test${path}`, { method, headers: { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) }),
  )
  return { status: response.status, body: await response.json() }
}

async function movements(kind: string, reference: string): Promise<number> {
  await app.kassa.runtime.ledger.drain()
  await second.runtime.ledger.drain()
  const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) as count from ledger_movements where kind = ${kind} and reference = ${reference}`)
  return Number(row!.count)
}

async function settledBalance(accountId: string): Promise<unknown> {
  await app.kassa.runtime.ledger.drain()
  await second.runtime.ledger.drain()
  const [row] = await queryRows(app.kassa.runtime.db, sql`select available::text, in_flight::text from ledger_balances where account_id = ${accountId} and asset = 'USDT'`)
  return row
}

/**
 * Moves the organization's clock in the database and lets both instances read it, without the
 * advance route (whose on-advance work would finalize at once, on one instance).
 */
async function moveClockQuietly(seconds: number): Promise<void> {
  await queryRows(
    app.kassa.runtime.db,
    sql`insert into org_clocks (org_id, offset_ms) values (${fx.org.id}, ${seconds * 1000}) on conflict (org_id) do update set offset_ms = org_clocks.offset_ms + ${seconds * 1000}`,
  )
  await app.kassa.runtime.clock.refresh(fx.org.id)
  await second.runtime.clock.refresh(fx.org.id)
}

test('two instances observing and finalizing the same arrival credit it once', async () => {
  const account = await fx.mint('shared')
  const address = (await fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDT' })).body.address
  const body = { network: 'tron', asset: 'USDT', address, amount: '6', txHash: txHash('tron') }
  const answers = await Promise.all([fx.call('POST', '/v1/sandbox/chain/arrivals', body), viaSecond('POST', '/v1/sandbox/chain/arrivals', body)])
  expect(answers.map((answer) => answer.status).sort()).toEqual([200, 201])
  expect(answers[0]!.body.id).toBe(answers[1]!.body.id)
  const arrivalId = answers[0]!.body.id as string
  expect(await movements('deposit_arrival', arrivalId)).toBe(1)

  await moveClockQuietly(57)
  // Each instance's hot balances know only their own commits since start; both re-read the database
  // so that both could decide to finalize, and only the guard in the commit can stop the second.
  await movements('deposit_arrival', arrivalId)
  await app.kassa.runtime.ledger.load()
  await second.runtime.ledger.load()
  const finalized = await Promise.all([app.kassa.deposits.finalizeDueArrivals(), second.deposits.finalizeDueArrivals()])
  expect(finalized[0] + finalized[1]).toBe(1)
  expect(await movements('deposit_final', arrivalId)).toBe(1)
  expect(await settledBalance(account)).toEqual({ available: '6000000', in_flight: '0' })
  await expectVerified(app)
})

test('two instances resolving the same suspense arrival move its money once', async () => {
  const account = await fx.mint('suspense-shared')
  const body = { network: 'tron', asset: 'USDT', address: 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t', amount: '2', txHash: txHash('tron') }
  const arrival = (await fx.call('POST', '/v1/sandbox/chain/arrivals', body)).body
  expect(arrival.disposition).toBe('suspense')
  await moveClockQuietly(57)
  await app.kassa.deposits.finalizeDueArrivals()
  await app.kassa.runtime.ledger.drain()
  await second.runtime.ledger.load()
  const outcomes = await Promise.allSettled([app.kassa.deposits.assignSuspense(arrival.id, { accountId: account }), second.deposits.returnSuspense(arrival.id, {})])
  expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1)
  const refused = outcomes.find((outcome) => outcome.status === 'rejected') as PromiseRejectedResult
  expect(refused.reason.code).toBe('conflict')
  const resolutions = (await movements('suspense_assign', arrival.id)) + (await movements('suspense_return', arrival.id))
  expect(resolutions).toBe(1)
  await expectVerified(app)
})
