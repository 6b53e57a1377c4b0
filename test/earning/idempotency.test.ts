import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { and, eq, sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { idempotencyRecords } from '../../db/schema/index.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { createVault, eventsOf, openCycleOf, sharesOf } from './support.ts'

/** Headers a replay may give differently from the first answer (docs/idempotency.md). */
const MAY_DIFFER = new Set(['idempotent-replayed', 'x-request-id', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'date'])

let app: TestApp
let fx: LedgerFixture
let alice: string
let bob: string

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app, 'Keyed Earning')
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  await fx.fund(alice, '1000')
  await fx.fund(bob, '1000')
  await createVault(app, 'kdirect', { instantRedemptionFeeBps: 50, instantBuffer: '100' })
  await createVault(app, 'kclaim', { payoutMode: 'claimable' })
}, 60_000)
afterAll(async () => {
  await app.close()
}, 30_000)

/** The raw answer to a keyed request: status, text and every header. */
async function keyed(method: string, path: string, body: unknown, idempotencyKey: string) {
  const response = await app.kassa.handle(
    new Request(`http://kassa.test${path}`, {
      method,
      headers: { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(body),
    }),
  )
  return { status: response.status, text: await response.text(), headers: Object.fromEntries(response.headers) }
}

const kept = (headers: Record<string, string>) => Object.fromEntries(Object.entries(headers).filter(([name]) => !MAY_DIFFER.has(name)))

async function record(key: string) {
  const [row] = await app.kassa.runtime.db.select().from(idempotencyRecords).where(and(eq(idempotencyRecords.orgId, fx.org.id), eq(idempotencyRecords.key, key)))
  return row
}

async function intentsOf(accountId: string, kind: 'deposit' | 'redeem'): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from vault_intents where account_id = ${accountId} and kind = ${kind}`)
  return row!.count
}

/** Sends a keyed request twice: the second is the first answer byte for byte (status, body, content type), marked as a replay. */
async function sendTwice(method: string, path: string, body: unknown, idempotencyKey: string, status: number) {
  const first = await keyed(method, path, body, idempotencyKey)
  expect({ status: first.status, text: first.text }).toEqual({ status, text: first.text })
  expect(first.headers['content-type']).toBe(status >= 400 ? 'application/json' : 'application/json;charset=utf-8')
  // The key's record holds exactly the answer that was sent.
  const saved = await record(idempotencyKey)
  expect(saved?.state).toBe('completed')
  expect(saved?.responseStatus).toBe(status)
  expect(saved?.responseBody).toBe(first.text)
  const replay = await keyed(method, path, body, idempotencyKey)
  expect(replay.status).toBe(status)
  expect(replay.text).toBe(first.text)
  expect(replay.headers['idempotent-replayed']).toBe('true')
  expect(kept(replay.headers)).toEqual(kept(first.headers))
  return JSON.parse(first.text)
}

async function expectConflict(method: string, path: string, body: unknown, idempotencyKey: string) {
  const conflict = await keyed(method, path, body, idempotencyKey)
  expect(conflict.status).toBe(409)
  expect(JSON.parse(conflict.text).error.code).toBe('idempotency_conflict')
}

/** A failure raised by the database inside the commit of the next write to `vault_intents` of this kind. */
async function breakIntentWrites(event: 'insert' | 'update'): Promise<() => Promise<void>> {
  const db = app.kassa.runtime.db
  await db.execute(sql`create or replace function earning_test_fail() returns trigger as $$ begin raise exception 'injected failure'; end; $$ language plpgsql`)
  await db.execute(sql.raw(`create trigger earning_test_fail before ${event} on vault_intents for each row execute function earning_test_fail()`))
  return async () => {
    await db.execute(sql`drop trigger earning_test_fail on vault_intents`)
  }
}

describe('subscriptions with an Idempotency-Key', () => {
  test('the same key replays the first answer and subscribes once; another body with it is idempotency_conflict', async () => {
    const body = { accountId: alice, vaultId: 'kdirect', amount: '10' }
    const subscription = await sendTwice('POST', '/v1/subscriptions', body, 'sub-1', 201)
    expect(subscription).toMatchObject({ accountId: alice, vaultId: 'kdirect', state: 'confirmed' })
    expect(await intentsOf(alice, 'deposit')).toBe(1)
    expect(await fx.balance(alice)).toMatchObject({ available: '990.000000', inFlight: '10.000000' })
    await expectConflict('POST', '/v1/subscriptions', { ...body, amount: '11' }, 'sub-1')
    expect(await intentsOf(alice, 'deposit')).toBe(1)
    expect(await fx.balance(alice)).toMatchObject({ available: '990.000000', inFlight: '10.000000' })
  })

  test('a refusal is replayed even after money arrived, and nothing is subscribed', async () => {
    const poor = await fx.mint('poor')
    const body = { accountId: poor, vaultId: 'kdirect', amount: '5' }
    const refused = await sendTwice('POST', '/v1/subscriptions', body, 'sub-refused', 422)
    expect(refused.error.code).toBe('insufficient_available')
    await fx.fund(poor, '50')
    const again = await keyed('POST', '/v1/subscriptions', body, 'sub-refused')
    expect(again.status).toBe(422)
    expect(await intentsOf(poor, 'deposit')).toBe(0)
  })

  test('a cancellation replays its first answer and gives the amount back once', async () => {
    const subscribed = await fx.call('POST', '/v1/subscriptions', { accountId: bob, vaultId: 'kdirect', amount: '20' })
    expect(subscribed.status).toBe(201)
    const cancelled = await sendTwice('POST', '/v1/subscriptions/cancel', { recordId: subscribed.body.recordId }, 'cancel-1', 200)
    expect(cancelled).toMatchObject({ id: subscribed.body.id, state: 'cancelled', reason: 'cancelled' })
    expect(await fx.balance(bob)).toMatchObject({ available: '1000.000000', inFlight: '0.000000' })
    expect((await eventsOf(app, 'transaction.deposit.cancelled')).filter((row) => row.data.intentId === subscribed.body.id)).toHaveLength(1)
    await expectVerified(app)
  })

  test('the key is written in the commit of the subscription: a failed commit leaves no record, and the retry runs once', async () => {
    const carol = await fx.mint('carol')
    await fx.fund(carol, '100')
    const body = { accountId: carol, vaultId: 'kdirect', amount: '30' }
    const repair = await breakIntentWrites('insert')
    let failed: Awaited<ReturnType<typeof keyed>>
    try {
      failed = await keyed('POST', '/v1/subscriptions', body, 'sub-crash')
    } finally {
      await repair()
    }
    expect(failed.status).toBe(500)
    expect(await record('sub-crash')).toBeUndefined()
    expect(await intentsOf(carol, 'deposit')).toBe(0)
    expect(await fx.balance(carol)).toMatchObject({ available: '100.000000', inFlight: '0.000000' })
    const subscribed = await sendTwice('POST', '/v1/subscriptions', body, 'sub-crash', 201)
    expect(await intentsOf(carol, 'deposit')).toBe(1)
    const [row] = await queryRows<{ id: string }>(app.kassa.runtime.db, sql`select id from vault_intents where account_id = ${carol}`)
    expect(row!.id).toBe(subscribed.id)
    expect(await fx.balance(carol)).toMatchObject({ available: '70.000000', inFlight: '30.000000' })
    await expectVerified(app)
  })
})

describe('redemptions and claims with an Idempotency-Key', () => {
  test('a queued redemption replays its first answer and locks the shares once', async () => {
    expect((await fx.call('POST', '/v1/subscriptions', { accountId: alice, vaultId: 'kclaim', amount: '100' })).status).toBe(201)
    const depositCycle = await openCycleOf(app, 'kclaim', 'deposit')
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${depositCycle.cycleId}/settle`)).body.state).toBe('settled')
    const body = { accountId: alice, vaultId: 'kclaim', mode: 'queued', shares: '40' }
    const redemption = await sendTwice('POST', '/v1/redemptions', body, 'redeem-1', 201)
    expect(redemption).toMatchObject({ mode: 'queued', state: 'confirmed', shares: '40.000000' })
    expect(sharesOf(app, fx.org.id, alice, 'kclaim')).toEqual({ available: '60.000000', held: '40.000000' })
    await expectConflict('POST', '/v1/redemptions', { ...body, shares: '41' }, 'redeem-1')
    expect(await intentsOf(alice, 'redeem')).toBe(1)
  })

  test('a claim replays its first answer (not "nothing to claim") and pays out once', async () => {
    const cycle = await openCycleOf(app, 'kclaim', 'redeem')
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)).body.state).toBe('settled')
    const before = await fx.balance(alice)
    const claimed = await sendTwice('POST', '/v1/claims', { accountId: alice, vaultId: 'kclaim' }, 'claim-1', 200)
    expect(claimed).toMatchObject({ accountId: alice, vaultId: 'kclaim', amount: '40.000000' })
    const micro = (value: string) => BigInt(value.replace('.', ''))
    expect(micro((await fx.balance(alice)).available) - micro(before.available)).toBe(40_000_000n)
    expect((await eventsOf(app, 'transaction.claim.confirmed')).filter((row) => row.data.accountId === alice)).toHaveLength(1)
    await expectConflict('POST', '/v1/claims', { accountId: bob, vaultId: 'kclaim' }, 'claim-1')
    await expectVerified(app)
  })

  test('the key is written in the commit of the claim: a failed commit leaves no record, and the retry runs once', async () => {
    expect((await fx.call('POST', '/v1/subscriptions', { accountId: bob, vaultId: 'kclaim', amount: '50' })).status).toBe(201)
    await app.ops('POST', `/ops/v1/vault-cycles/${(await openCycleOf(app, 'kclaim', 'deposit')).cycleId}/settle`)
    expect((await fx.call('POST', '/v1/redemptions', { accountId: bob, vaultId: 'kclaim', mode: 'queued', shares: '25' })).status).toBe(201)
    await app.ops('POST', `/ops/v1/vault-cycles/${(await openCycleOf(app, 'kclaim', 'redeem')).cycleId}/settle`)
    const before = await fx.balance(bob)
    expect(before.inFlight).toBe('25.000000')
    const repair = await breakIntentWrites('update')
    let failed: Awaited<ReturnType<typeof keyed>>
    try {
      failed = await keyed('POST', '/v1/claims', { accountId: bob, vaultId: 'kclaim' }, 'claim-crash')
    } finally {
      await repair()
    }
    expect(failed.status).toBe(500)
    expect(await record('claim-crash')).toBeUndefined()
    expect(await fx.balance(bob)).toEqual(before)
    const claimed = await sendTwice('POST', '/v1/claims', { accountId: bob, vaultId: 'kclaim' }, 'claim-crash', 200)
    expect(claimed.amount).toBe('25.000000')
    expect(await fx.balance(bob)).toMatchObject({ inFlight: '0.000000', total: before.total })
    await expectVerified(app)
  })

  test('an instant redemption replays its first answer (not quote_consumed) and executes once', async () => {
    expect((await fx.call('POST', '/v1/subscriptions', { accountId: bob, vaultId: 'kdirect', amount: '100' })).status).toBe(201)
    await app.ops('POST', `/ops/v1/vault-cycles/${(await openCycleOf(app, 'kdirect', 'deposit')).cycleId}/settle`)
    const quote = await fx.call('POST', '/v1/quotes', { kind: 'instant_redeem', accountId: bob, vaultId: 'kdirect', shares: '30' })
    expect(quote.status).toBe(201)
    const sharesBefore = sharesOf(app, fx.org.id, bob, 'kdirect')
    const body = { accountId: bob, vaultId: 'kdirect', mode: 'instant', quoteId: quote.body.id }
    const executed = await sendTwice('POST', '/v1/redemptions', body, 'instant-1', 201)
    expect(executed).toMatchObject({ mode: 'instant', state: 'settled', shares: '30.000000', quoteId: quote.body.id })
    const micro = (value: string) => BigInt(value.replace('.', ''))
    expect(micro(sharesBefore.available) - micro(sharesOf(app, fx.org.id, bob, 'kdirect').available)).toBe(30_000_000n)
    expect((await app.call('GET', '/v1/vaults/kdirect')).body.instantBuffer).toBe('70.000000')
    await expectVerified(app)
  })
})

describe('a cycle that closes while a keyed intent is written', () => {
  /** Closes the vault's open cycle of this kind just before the next ledger submission, as another instance closing it would. */
  function closeCycleBeforeNextSubmit(vaultId: string, kind: 'deposit' | 'redeem'): void {
    const ledger = app.kassa.runtime.ledger
    const submit = ledger.submit
    ledger.submit = async function (this: typeof ledger, ...args: Parameters<typeof submit>) {
      ledger.submit = submit
      const cycle = await openCycleOf(app, vaultId, kind)
      expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/close`)).body.state).not.toBe('open')
      return submit.apply(ledger, args)
    } as typeof submit
  }

  test('a subscription goes to the next cycle, and its key records that answer, the one sent', async () => {
    const dave = await fx.mint('dave')
    await fx.fund(dave, '100')
    const closing = await openCycleOf(app, 'kdirect', 'deposit')
    closeCycleBeforeNextSubmit('kdirect', 'deposit')
    const body = { accountId: dave, vaultId: 'kdirect', amount: '15' }
    const subscription = await sendTwice('POST', '/v1/subscriptions', body, 'sub-next-cycle', 201)
    expect(subscription.settlementCycle).toBe(closing.settlementCycle + 1)
    const rows = await queryRows<{ id: string; cycle_id: string }>(app.kassa.runtime.db, sql`select id, cycle_id from vault_intents where account_id = ${dave}`)
    expect(rows).toEqual([{ id: subscription.id, cycle_id: (await openCycleOf(app, 'kdirect', 'deposit')).cycleId }])
    expect(await fx.balance(dave)).toMatchObject({ available: '85.000000', inFlight: '15.000000' })
  })

  test('so does a queued redemption', async () => {
    const closing = await openCycleOf(app, 'kclaim', 'redeem')
    closeCycleBeforeNextSubmit('kclaim', 'redeem')
    const redemption = await sendTwice('POST', '/v1/redemptions', { accountId: alice, vaultId: 'kclaim', mode: 'queued', shares: '1' }, 'redeem-next-cycle', 201)
    expect(redemption.settlementCycle).toBe(closing.settlementCycle + 1)
    const rows = await queryRows<{ id: string }>(app.kassa.runtime.db, sql`select id from vault_intents where account_id = ${alice} and kind = 'redeem' and cycle_id = ${(await openCycleOf(app, 'kclaim', 'redeem')).cycleId}`)
    expect(rows).toEqual([{ id: redemption.id }])
    await expectVerified(app)
  })
})
