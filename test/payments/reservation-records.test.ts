import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { AssertionError } from '../../server/lib/assert.ts'
import type { TestApp } from '../support/app.ts'
import { refusal, type LedgerFixture } from '../ledger/support.ts'
import { fundedCardHolder } from './support.ts'
import { eventually } from '../support/eventually.ts'

let app: TestApp
let fx: LedgerFixture
let payer: string

beforeAll(async () => {
  ;({ app, fx, payer } = await fundedCardHolder())
})
afterAll(async () => {
  await app.close()
})

const authorize = (amount: string) => fx.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount })

async function verifyReport(): Promise<{ problems: Array<{ check: string; detail: Record<string, string> }>; counts: { movements: number; postings: number } }> {
  await app.kassa.runtime.ledger.drain()
  const report = await app.ops('GET', '/ops/v1/ledger/verify')
  expect(report.status).toBe(200)
  return report.body
}

async function movementRows(paymentId: string): Promise<string[]> {
  await app.kassa.runtime.ledger.drain()
  const rows = await queryRows<{ kind: string }>(app.kassa.runtime.db, sql`select kind from ledger_movements where reference = ${paymentId} order by kind`)
  return rows.map((row) => row.kind)
}

describe("an authorization's reservation is recorded by its payment's row", () => {
  test('no movement row is written for it; the journal derives its two legs, and verify proves every balance through capture, void and lapse', async () => {
    const before = await verifyReport()
    const captured = (await authorize('7')).body
    const voided = (await authorize('1.5')).body
    const lapsing = (await authorize('0.25')).body
    const declined = (await authorize('100000')).body
    expect(declined).toMatchObject({ state: 'declined', failureCode: 'insufficient_available', holdId: null })
    for (const payment of [captured, voided, lapsing]) expect(await movementRows(payment.id)).toEqual([])
    expect(await movementRows(declined.id)).toEqual([])
    // Three reservations of two legs each, derived from their payments; the decline reserved nothing.
    const authorized = await verifyReport()
    expect(authorized.problems).toEqual([])
    expect(authorized.counts).toMatchObject({ movements: before.counts.movements + 3, postings: before.counts.postings + 6 })
    expect(await fx.balance(payer)).toMatchObject({ held: '8.750000' })

    expect((await fx.call('POST', `/v1/payments/${captured.id}/capture`, { amount: '5' })).status).toBe(200)
    expect((await fx.call('POST', `/v1/payments/${voided.id}/void`)).status).toBe(200)
    expect((await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 24 * 3600 + 60 })).status).toBe(200)
    for (let attempt = 0; attempt < 50 && (await fx.call('GET', `/v1/payments/${lapsing.id}`)).body.state !== 'lapsed'; attempt++) {
      await app.kassa.holds.expiry.runOnce()
      await app.kassa.runtime.ledger.drain()
    }
    // What follows a reservation is a movement row of its own, as before.
    expect(await movementRows(captured.id)).toEqual(['payment_capture'])
    expect(await movementRows(voided.id)).toEqual(['payment_release'])
    expect((await fx.call('GET', `/v1/payments/${lapsing.id}`)).body.state).toBe('lapsed')
    expect(await fx.balance(payer)).toMatchObject({ held: '0.000000' })
    expect((await verifyReport()).problems).toEqual([])
  })

  test("the database keeps a reservation's record: its amount, account, asset and hold never change and its payment is never deleted, while its state moves on", async () => {
    const payment = (await authorize('2')).body
    await app.kassa.runtime.ledger.drain()
    for (const change of [
      sql`update payments set amount = amount + 1 where id = ${payment.id}`,
      sql`update payments set account_id = 'acct_other' where id = ${payment.id}`,
      sql`update payments set asset = 'USDT' where id = ${payment.id}`,
      sql`update payments set hold_id = null where id = ${payment.id}`,
      sql`delete from payments where id = ${payment.id}`,
    ]) {
      expect(await refusal(() => app.kassa.runtime.db.execute(change))).toContain(`payment ${payment.id} records a reservation in the ledger`)
    }
    // A payment that reserved nothing cannot be given a hold afterwards either.
    const declined = (await authorize('100000')).body
    expect(declined).toMatchObject({ state: 'declined', holdId: null })
    expect((await queryRows(app.kassa.runtime.db, sql`select id from payments where id = ${declined.id}`)).length).toBe(1)
    expect(await refusal(() => app.kassa.runtime.db.execute(sql`update payments set hold_id = ${'hold_' + declined.id.slice('pay_'.length)} where id = ${declined.id}`))).toContain('records a reservation')
    // Its state and what follows it still move (the capture below), and nothing else was changed.
    expect((await fx.call('POST', `/v1/payments/${payment.id}/capture`, {})).body).toMatchObject({ state: 'captured', amount: '2.000000' })
    expect((await verifyReport()).problems).toEqual([])
  })

  test('verify reads the reservation from its payment: a payment whose amount was changed behind the database\'s back is a balance that no longer matches', async () => {
    const payment = (await authorize('3')).body
    await app.kassa.runtime.ledger.drain()
    const db = app.kassa.runtime.db
    await db.execute(sql`alter table payments disable trigger payments_reservation_record`)
    try {
      await db.execute(sql`update payments set amount = amount + 1000000 where id = ${payment.id}`)
      const report = await verifyReport()
      expect(report.problems).toContainEqual(expect.objectContaining({ check: 'balance_matches_postings', detail: expect.objectContaining({ account_id: payer, asset: 'USDC' }) }))
      await db.execute(sql`update payments set amount = amount - 1000000 where id = ${payment.id}`)
    } finally {
      await db.execute(sql`alter table payments enable trigger payments_reservation_record`)
    }
    expect((await verifyReport()).problems).toEqual([])
    expect((await fx.call('POST', `/v1/payments/${payment.id}/void`)).status).toBe(200)
  })

  test('a payment authorized before the rule, with a movement row of its own, is counted once', async () => {
    const payment = (await authorize('4')).body
    const before = await verifyReport()
    // Its reservation as the earlier code wrote it: a payment_authorization movement naming the payment.
    await app.kassa.runtime.db.execute(sql`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
      select 'mv_legacy_' || id, org_id, 'payment_authorization', id, created_at, array[account_id, account_id], array['available', 'held'], array[asset, asset], array[-amount, amount]
      from payments where id = ${payment.id}`)
    const after = await verifyReport()
    expect(after.problems).toEqual([])
    expect(after.counts).toMatchObject({ movements: before.counts.movements, postings: before.counts.postings })
    expect((await fx.call('POST', `/v1/payments/${payment.id}/void`)).status).toBe(200)
    expect((await verifyReport()).problems).toEqual([])
  })

  test('the ledger refuses an operation whose postings are not the reservation its payment records, and changes nothing', async () => {
    const ledger = app.kassa.runtime.ledger
    const balanceBefore = await fx.balance(payer)
    const payment = { id: 'pay_' + 'a'.repeat(32), orgId: fx.org.id, accountId: payer, asset: 'USDC', amount: 1_000_000n, requestedAmount: '1', state: 'authorized' as const, holdId: 'hold_' + 'a'.repeat(32), createdAt: new Date() }
    const legs = (amount: bigint, held: string = 'held') => [
      { accountId: payer, kind: 'customer' as const, bucket: 'available' as const, asset: 'USDC', amountMinor: -amount },
      { accountId: payer, kind: 'customer' as const, bucket: held as 'held', asset: 'USDC', amountMinor: amount },
    ]
    for (const op of [
      { postings: legs(2_000_000n), payments: [payment] },
      { postings: legs(1_000_000n, 'in_flight'), payments: [payment] },
      { postings: legs(1_000_000n), payments: [{ ...payment, holdId: null }] },
      { postings: legs(1_000_000n), payments: [] },
    ]) {
      expect(() => ledger.submit({ orgId: fx.org.id, recordedByRow: true, createdAt: new Date(), ...op })).toThrow(AssertionError)
    }
    await ledger.drain()
    expect(await fx.balance(payer)).toEqual(balanceBefore)
    expect((await queryRows(app.kassa.runtime.db, sql`select id from payments where id = ${payment.id}`)).length).toBe(0)
  })

  test("a reservation's payment is created by its own commit: a second row with its key fails that commit, and nothing of it is applied", async () => {
    const ledger = app.kassa.runtime.ledger
    const db = app.kassa.runtime.db
    const first = (await authorize('1')).body
    expect(first).toMatchObject({ state: 'authorized' })
    await ledger.drain()
    const balanceBefore = await fx.balance(payer)
    const stored = async () => queryRows(db, sql`select state, amount::text, hold_id, closed_at from payments where id = ${first.id}`)
    const rowBefore = await stored()
    // The same payment id again, as a second reservation: an upsert would have moved the balance
    // a second time under the one row, which records a single reservation.
    const again = { id: first.id, orgId: fx.org.id, accountId: payer, asset: 'USDC', amount: 1_000_000n, requestedAmount: '1', state: 'authorized' as const, holdId: 'hold_' + 'b'.repeat(32), createdAt: new Date() }
    const postings = [
      { accountId: payer, kind: 'customer' as const, bucket: 'available' as const, asset: 'USDC', amountMinor: -1_000_000n },
      { accountId: payer, kind: 'customer' as const, bucket: 'held' as const, asset: 'USDC', amountMinor: 1_000_000n },
    ]
    expect(await refusal(() => ledger.submit({ orgId: fx.org.id, recordedByRow: true, createdAt: new Date(), postings, payments: [again] }))).toContain('payments_pkey')
    await ledger.drain()
    expect(await fx.balance(payer)).toEqual(balanceBefore)
    expect(await stored()).toEqual(rowBefore)
    expect((await verifyReport()).problems).toEqual([])
    // The writer reads the balances back and goes on by itself.
    await eventually(() => ledger.writer.healthy(), { what: 'the writer healthy again' })
    expect((await authorize('0.5')).body).toMatchObject({ state: 'authorized' })
    expect((await fx.call('POST', `/v1/payments/${first.id}/void`)).status).toBe(200)
  })
})
