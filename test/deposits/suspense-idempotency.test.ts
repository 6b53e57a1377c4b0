import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { and, eq, sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { idempotencyRecords } from '../../db/schema/index.ts'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import { OPERATOR_SCOPE } from '../../server/platform/idempotency-in-commit.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { systemBalance, txHash } from './support.ts'

/** The wall clock is pinned: an arrival becomes final only when a test advances the organization's clock. */
const WALL_CLOCK_MS = Date.UTC(2030, 0, 1)
/** Headers a replay may give differently from the first answer (docs/idempotency.md). */
const MAY_DIFFER = new Set(['idempotent-replayed', 'x-request-id', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'date'])

let app: TestApp
let fx: LedgerFixture

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => WALL_CLOCK_MS })
  fx = await ledgerFixture(app, 'Keyed Suspense')
})
afterAll(async () => {
  await app.close()
})

const unknownSui = () => `0x${Array.from({ length: 64 }, () => '0123456789abcdef'[Math.floor(Math.random() * 16)]).join('')}`
const advance = async (seconds: number) => expect((await fx.call('POST', '/v1/sandbox/clock/advance', { seconds })).status).toBe(200)

/** A suspense arrival of `amount` USDC on Sui, final unless told otherwise. */
async function suspenseArrival(amount: string, final = true): Promise<string> {
  const arrival = await fx.call('POST', '/v1/sandbox/chain/arrivals', { network: 'sui', asset: 'USDC', address: unknownSui(), amount, txHash: txHash('sui') })
  expect(arrival.body.disposition).toBe('suspense')
  if (final) await advance(1)
  return arrival.body.id
}

/** The raw answer to an operator's keyed request: status, text and every header. */
async function keyed(path: string, body: unknown, idempotencyKey: string) {
  const response = await app.kassa.handle(
    new Request(`http://kassa.test${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${app.config.operatorToken}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(body),
    }),
  )
  return { status: response.status, text: await response.text(), headers: Object.fromEntries(response.headers) }
}

const kept = (headers: Record<string, string>) => Object.fromEntries(Object.entries(headers).filter(([name]) => !MAY_DIFFER.has(name)))

async function record(orgId: string, key: string) {
  const [row] = await app.kassa.runtime.db.select().from(idempotencyRecords).where(and(eq(idempotencyRecords.orgId, orgId), eq(idempotencyRecords.key, key)))
  return row
}

/** Sends a keyed operator request twice: the second is the first answer byte for byte (status, body, content type), marked as a replay. */
async function sendTwice(path: string, body: unknown, idempotencyKey: string, status: number) {
  const first = await keyed(path, body, idempotencyKey)
  expect({ status: first.status, text: first.text }).toEqual({ status, text: first.text })
  expect(first.headers['content-type']).toBe(status >= 400 ? 'application/json' : 'application/json;charset=utf-8')
  // The key lives in the operators' scope and holds exactly the answer sent.
  const saved = await record(OPERATOR_SCOPE, idempotencyKey)
  expect(saved?.state).toBe('completed')
  expect(saved?.responseStatus).toBe(status)
  expect(saved?.responseBody).toBe(first.text)
  expect(await record(fx.org.id, idempotencyKey)).toBeUndefined()
  const replay = await keyed(path, body, idempotencyKey)
  expect(replay.status).toBe(status)
  expect(replay.text).toBe(first.text)
  expect(replay.headers['idempotent-replayed']).toBe('true')
  expect(kept(replay.headers)).toEqual(kept(first.headers))
  return JSON.parse(first.text)
}

async function movementsOf(arrivalId: string): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from ledger_movements where reference = ${arrivalId} and kind in ('suspense_assign', 'suspense_return')`)
  return row!.count
}

describe('resolving suspense with an Idempotency-Key', () => {
  test('an assignment replays its first answer and credits the account once; another body with the key is idempotency_conflict', async () => {
    const account = await fx.mint('assignee')
    const arrivalId = await suspenseArrival('11')
    const suspense = await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDC')
    const assigned = await sendTwice(`/ops/v1/suspense/${arrivalId}/assign`, { accountId: account, note: 'wrote in' }, 'assign-1', 200)
    expect(assigned).toMatchObject({ id: arrivalId, disposition: 'assigned', accountId: account, resolutionNote: 'wrote in' })
    expect(await fx.balance(account)).toMatchObject({ available: '11.000000', total: '11.000000' })
    expect(await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.suspense, 'USDC')).toBe(suspense - 11_000_000n)
    expect(await movementsOf(arrivalId)).toBe(1)
    const conflict = await keyed(`/ops/v1/suspense/${arrivalId}/assign`, { accountId: account, note: 'another note' }, 'assign-1')
    expect(conflict.status).toBe(409)
    expect(JSON.parse(conflict.text).error.code).toBe('idempotency_conflict')
    expect(await fx.balance(account)).toMatchObject({ available: '11.000000' })
    await expectVerified(app)
  })

  test('a return replays its first answer and leaves suspense once', async () => {
    const arrivalId = await suspenseArrival('4')
    const clearing = await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.chainClearing, 'USDC')
    const returned = await sendTwice(`/ops/v1/suspense/${arrivalId}/return`, { note: 'unknown sender' }, 'return-1', 200)
    expect(returned).toMatchObject({ id: arrivalId, disposition: 'returned', accountId: null })
    expect(await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.chainClearing, 'USDC')).toBe(clearing + 4_000_000n)
    expect(await movementsOf(arrivalId)).toBe(1)
    await expectVerified(app)
  })

  test('a refusal (still confirming) is replayed even once the arrival is final, and nothing moves', async () => {
    const account = await fx.mint('early')
    const arrivalId = await suspenseArrival('3', false)
    const refused = await sendTwice(`/ops/v1/suspense/${arrivalId}/assign`, { accountId: account }, 'assign-early', 409)
    expect(refused.error.code).toBe('conflict')
    await advance(1)
    const again = await keyed(`/ops/v1/suspense/${arrivalId}/assign`, { accountId: account }, 'assign-early')
    expect(again.status).toBe(409)
    expect(again.text).toBe(JSON.stringify(refused))
    expect(await movementsOf(arrivalId)).toBe(0)
    expect(await fx.balance(account)).toMatchObject({ total: '0.000000' })
  })

  test('the key is written in the commit of the movement: a failed commit leaves no record, and the retry runs once', async () => {
    const account = await fx.mint('after-failure')
    const arrivalId = await suspenseArrival('7')
    const db = app.kassa.runtime.db
    await db.execute(sql`create or replace function suspense_test_fail() returns trigger as $$ begin raise exception 'injected failure'; end; $$ language plpgsql`)
    await db.execute(sql`create trigger suspense_test_fail before insert on ledger_movements for each row execute function suspense_test_fail()`)
    let failed: Awaited<ReturnType<typeof keyed>>
    try {
      failed = await keyed(`/ops/v1/suspense/${arrivalId}/assign`, { accountId: account }, 'assign-crash')
    } finally {
      await db.execute(sql`drop trigger suspense_test_fail on ledger_movements`)
    }
    expect(failed.status).toBe(500)
    expect(await record(OPERATOR_SCOPE, 'assign-crash')).toBeUndefined()
    expect(await movementsOf(arrivalId)).toBe(0)
    expect(await fx.balance(account)).toMatchObject({ total: '0.000000' })
    const assigned = await sendTwice(`/ops/v1/suspense/${arrivalId}/assign`, { accountId: account }, 'assign-crash', 200)
    expect(assigned).toMatchObject({ disposition: 'assigned', accountId: account })
    expect(await movementsOf(arrivalId)).toBe(1)
    expect(await fx.balance(account)).toMatchObject({ available: '7.000000', total: '7.000000' })
    await expectVerified(app)
  })
})
