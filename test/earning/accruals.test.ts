import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { restartOnSameDatabase, startTestApp, type TestApp } from '../support/app.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { createVault, openCycleOf } from './support.ts'

let app: TestApp
let fx: LedgerFixture
let alice: string
let bob: string
/** The vaults' clock's days, D0 being the day the vault was created. */
const days: string[] = []

setDefaultTimeout(60_000)

const DAY = 86_400_000
const PRICE_ONE = 10n ** 18n
const micro = (text: string) => BigInt(text.replace('.', ''))

async function advanceVaults(seconds: number): Promise<Date> {
  const response = await app.ops('POST', '/ops/v1/vaults/clock/advance', { seconds })
  expect(response.status).toBe(200)
  return new Date(response.body.now)
}

async function settleOpenCycle(vaultId: string): Promise<void> {
  const cycle = await openCycleOf(app, vaultId, 'deposit')
  expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)).status).toBe(200)
}

async function nextDay(): Promise<void> {
  await advanceVaults(86_400)
  await app.kassa.earning!.runOnce()
}

async function accrualRows(): Promise<any[]> {
  return queryRows(app.kassa.runtime.db, sql`select account_id, vault_id, day::text as day, shares_open::text, shares_close::text, time_weighted_shares::text, price_open::text, price_close::text, gross::text, fee::text, net::text from vault_accruals order by day, account_id`)
}

async function settledAt(accountId: string): Promise<number> {
  const [row] = await queryRows<{ ms: string }>(app.kassa.runtime.db, sql`select (extract(epoch from settled_at) * 1000)::bigint::text as ms from vault_intents where account_id = ${accountId} and state = 'settled' order by settled_at desc limit 1`)
  return Number(row!.ms)
}

const list = (accountId: string, query = '') => fx.call('GET', `/v1/accounts/${accountId}/accruals${query}`)

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app)
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  await fx.fund(alice, '5000')
  await fx.fund(bob, '5000')
  // Day D0 starts at 06:00 on the vaults' clock, whenever the tests run: the daily price moves
  // then fall inside their day.
  const now = await advanceVaults(1)
  const sixNext = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1, 6)
  await advanceVaults(Math.ceil((sixNext - now.getTime()) / 1000))
  await createVault(app, 'yield', { dailyRate: '0.001', platformFeeBps: 1000 })
  const d0 = new Date(sixNext).toISOString().slice(0, 10)
  for (let day = 0; day < 5; day++) days.push(new Date(Date.parse(`${d0}T00:00:00Z`) + day * DAY).toISOString().slice(0, 10))
  // D0: alice subscribes 1000 at price 1 and is settled at once.
  expect((await fx.call('POST', '/v1/subscriptions', { accountId: alice, vaultId: 'yield', amount: '1000' })).status).toBe(201)
  await settleOpenCycle('yield')
}, 120_000)
afterAll(async () => {
  await app.close()
})

describe('daily accruals', () => {
  test('a day is computed once it is over: the settlement day earns nothing, and holds its time-weighted shares', async () => {
    expect(await accrualRows()).toEqual([])
    await nextDay()
    const rows = await accrualRows()
    expect(rows).toHaveLength(1)
    const settled = await settledAt(alice)
    const dayEnd = Date.parse(`${days[0]}T00:00:00Z`) + DAY
    expect(rows[0]).toEqual({
      account_id: alice,
      vault_id: 'yield',
      day: days[0],
      shares_open: '0',
      shares_close: '1000000000',
      time_weighted_shares: ((1_000_000_000n * BigInt(dayEnd - settled)) / BigInt(DAY)).toString(),
      price_open: PRICE_ONE.toString(),
      price_close: PRICE_ONE.toString(),
      gross: '0',
      fee: '0',
      net: '0',
    })
  })

  test('a price move earns the shares held before it; net up, fee down, gross = net + fee exactly', async () => {
    // D1: the price grew to 1.001 at 06:00 (synced by the pass of the step above). Bob subscribes
    // after that move and is settled at 1.001: his new shares do not earn it.
    expect((await fx.call('POST', '/v1/subscriptions', { accountId: bob, vaultId: 'yield', amount: '500' })).status).toBe(201)
    await settleOpenCycle('yield')
    await nextDay()
    const rows = (await accrualRows()).filter((row) => row.day === days[1])
    const aliceRow = rows.find((row) => row.account_id === alice)
    // 1000 shares × 0.001: net 1.000000; fee = 1 × 1000 / 9000 = 0.111111 (rounded down).
    expect(aliceRow).toMatchObject({ shares_open: '1000000000', shares_close: '1000000000', time_weighted_shares: '1000000000', price_open: PRICE_ONE.toString(), price_close: '1001000000000000000', net: '1000000', fee: '111111', gross: '1111111' })
    const bobRow = rows.find((row) => row.account_id === bob)
    const bobShares = (500_000_000n * PRICE_ONE) / 1_001_000_000_000_000_000n
    expect(bobRow).toMatchObject({ shares_open: '0', shares_close: bobShares.toString(), net: '0', fee: '0', gross: '0' })
    // D2: both earn the move to 1.002001; bob's net has a fraction of a unit, rounded up, and his fee down.
    await nextDay()
    const d2 = (await accrualRows()).filter((row) => row.day === days[2])
    const gainedBob = bobShares * (1_002_001_000_000_000_000n - 1_001_000_000_000_000_000n)
    expect(gainedBob % PRICE_ONE).not.toBe(0n)
    const bobNet = gainedBob / PRICE_ONE + 1n
    const bobFee = (gainedBob * 1000n) / (PRICE_ONE * 9000n)
    expect(d2.find((row) => row.account_id === bob)).toMatchObject({ net: bobNet.toString(), fee: bobFee.toString(), gross: (bobNet + bobFee).toString() })
    for (const row of await accrualRows()) expect(BigInt(row.net)).toBe(BigInt(row.gross) - BigInt(row.fee))
  })

  test('a day on which the price fell has a negative net and no fee', async () => {
    await app.ops('POST', '/ops/v1/vaults/yield/nav', { price: '0.99', dailyRate: '0' })
    await nextDay()
    const d3 = (await accrualRows()).filter((row) => row.day === days[3])
    const aliceRow = d3.find((row) => row.account_id === alice)!
    expect(aliceRow.price_close).toBe('990000000000000000')
    // 1000 shares from 1.002001 to 0.99: −12.001 exactly.
    expect(aliceRow).toMatchObject({ net: '-12001000', fee: '0', gross: '-12001000' })
  })

  test('computing a day again gives the same rows and adds none', async () => {
    const before = await accrualRows()
    for (const day of days.slice(0, 4)) {
      const again = await app.kassa.earning!.accruals.computeDay('yield', day)
      const asStored = again
        .map((row) => ({
          account_id: row.accountId,
          vault_id: row.vaultId,
          day: row.day,
          shares_open: `${row.sharesOpen}`,
          shares_close: `${row.sharesClose}`,
          time_weighted_shares: `${row.timeWeightedShares}`,
          price_open: `${row.priceOpen}`,
          price_close: `${row.priceClose}`,
          gross: `${row.gross}`,
          fee: `${row.fee}`,
          net: `${row.net}`,
        }))
        .sort((a, b) => a.account_id.localeCompare(b.account_id))
      expect(asStored).toEqual(before.filter((row) => row.day === day))
    }
    expect(await accrualRows()).toEqual(before)
    await app.kassa.earning!.runOnce()
    expect(await accrualRows()).toEqual(before)
    // A restarted instance finds the days done and computes none of them again.
    const second = await restartOnSameDatabase(app)
    try {
      expect(await second.earning!.accruals.runOnce()).toBe(0)
      expect(await accrualRows()).toEqual(before)
    } finally {
      for (const stop of second.runtime.stoppers.splice(0)) await stop()
    }
  })
})

describe('the accruals list', () => {
  test('lists an account\'s rows by day, with filters and pages', async () => {
    const all = await list(alice)
    expect(all.status).toBe(200)
    expect(all.body.accruals.map((row: any) => row.day)).toEqual(days.slice(0, 4))
    expect(all.body.accruals[1]).toMatchObject({ id: `acr_${days[1]!.replaceAll('-', '')}_yield`, accountId: alice, vaultId: 'yield', asset: 'USDC', sharesOpen: '1000.000000', grossYield: '1.111111', platformFee: '0.111111', netYield: '1.000000', sharePriceOpen: '1.000000', sharePriceClose: '1.001000', platformFeeBps: 1000 })
    const first = await list(alice, '?limit=2')
    expect(first.body.hasMore).toBe(true)
    expect(first.body.accruals).toHaveLength(2)
    const second = await list(alice, `?limit=2&after=${first.body.accruals[1].id}`)
    expect(second.body.accruals.map((row: any) => row.day)).toEqual(days.slice(2, 4))
    expect(second.body.hasMore).toBe(false)
    expect((await list(alice, `?from=${days[1]}&to=${days[2]}`)).body.accruals.map((row: any) => row.day)).toEqual(days.slice(1, 3))
    expect((await list(alice, '?vaultId=other')).body.accruals).toEqual([])
  })

  test('refuses bad filters naming the field', async () => {
    for (const [query, field] of [
      ['?from=2026-13-01', 'from'],
      ['?to=yesterday', 'to'],
      ['?after=nope', 'after'],
      ['?limit=0', 'limit'],
    ] as const) {
      const response = await list(alice, query)
      expect([response.status, response.body.error.code, response.body.error.field]).toEqual([400, 'invalid_request', field])
    }
    expect((await list('acct_unknown')).status).toBe(404)
  })
})

describe('yield reports', () => {
  test('totals per account and vault equal the sum of their rows exactly, in JSON and CSV', async () => {
    const response = await fx.call('GET', `/v1/yield-reports?from=${days[0]}&to=${days[3]}`)
    expect(response.status).toBe(200)
    expect(response.body.lines).toHaveLength(2)
    for (const line of response.body.lines) {
      const rows = (await list(line.accountId, `?from=${days[0]}&to=${days[3]}&limit=200`)).body.accruals
      const sum = (field: string) => rows.reduce((total: bigint, row: any) => total + micro(row[field]), 0n)
      expect(line.days).toBe(rows.length)
      expect(micro(line.grossYield)).toBe(sum('grossYield'))
      expect(micro(line.platformFee)).toBe(sum('platformFee'))
      expect(micro(line.netYield)).toBe(sum('netYield'))
      expect(micro(line.netYield)).toBe(micro(line.grossYield) - micro(line.platformFee))
    }
    const one = await fx.call('GET', `/v1/yield-reports?from=${days[1]}&to=${days[1]}&accountId=${alice}`)
    expect(one.body.lines).toEqual([{ accountId: alice, vaultId: 'yield', asset: 'USDC', days: 1, grossYield: '1.111111', platformFee: '0.111111', netYield: '1.000000' }])
    const csv = await app.call('GET', `/v1/yield-reports?from=${days[0]}&to=${days[3]}`, { key: fx.org.testKey, headers: { accept: 'text/csv' } })
    expect(csv.status).toBe(200)
    expect(csv.headers.get('content-type')).toContain('text/csv')
    const lines = (csv.body as string).trim().split('\r\n')
    expect(lines[0]).toBe('accountId,vaultId,asset,from,to,days,grossYield,platformFee,netYield')
    expect(lines.slice(1)).toEqual(response.body.lines.map((line: any) => [line.accountId, line.vaultId, line.asset, days[0], days[3], line.days, line.grossYield, line.platformFee, line.netYield].join(',')))
  })

  test('another organization sees none of these rows, and bad periods are refused naming the field', async () => {
    const other = await ledgerFixture(app, 'Other Org')
    expect((await other.call('GET', `/v1/yield-reports?from=${days[0]}&to=${days[3]}`)).body.lines).toEqual([])
    expect((await other.call('GET', `/v1/accounts/${alice}/accruals`)).status).toBe(404)
    for (const [query, field] of [
      [`from=${days[3]}&to=${days[0]}`, 'to'],
      ['from=2025-01-01&to=2026-06-01', 'to'],
      [`from=bad&to=${days[0]}`, 'from'],
    ] as const) {
      const response = await fx.call('GET', `/v1/yield-reports?${query}`)
      expect([response.status, response.body.error.field]).toEqual([400, field])
    }
  })
})

describe('a redemption during a day', () => {
  test('burnt shares weigh for the time held, the day closes on what the ledger holds', async () => {
    // D4: alice redeems 400 of her 1000 shares; the redeem cycle settles during the day.
    expect((await fx.call('POST', '/v1/redemptions', { accountId: alice, vaultId: 'yield', mode: 'queued', shares: '400' })).status).toBe(201)
    const cycle = await openCycleOf(app, 'yield', 'redeem')
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)).status).toBe(200)
    const burntAt = await settledAt(alice)
    await nextDay()
    const row = (await accrualRows()).find((entry) => entry.day === days[4] && entry.account_id === alice)
    const start = Date.parse(`${days[4]}T00:00:00Z`)
    const weighted = (1_000_000_000n * BigInt(burntAt - start) + 600_000_000n * BigInt(start + DAY - burntAt)) / BigInt(DAY)
    expect(row).toMatchObject({ shares_open: '1000000000', shares_close: '600000000', time_weighted_shares: weighted.toString() })
    const ledger = app.kassa.runtime.ledger.balance(fx.org.id, alice, 'shares:yield')!
    expect((ledger.available + ledger.held).toString()).toBe(row.shares_close)
    expect(BigInt(row.net)).toBe(BigInt(row.gross) - BigInt(row.fee))
  })
})

describe('when a day is computed', () => {
  test('an hour after it ends, so a settlement running across midnight lands in its day first', async () => {
    const d5 = new Date(Date.parse(`${days[4]}T00:00:00Z`) + DAY).toISOString().slice(0, 10)
    const marked = async () => (await queryRows<{ day: string }>(app.kassa.runtime.db, sql`select day::text as day from vault_accrual_days where vault_id = 'yield' and day = ${d5}::date`)).length
    // From D5 06:00 to D6 00:30: D5 is over by half an hour only.
    await advanceVaults(18.5 * 3600)
    await app.kassa.earning!.runOnce()
    expect(await marked()).toBe(0)
    expect((await accrualRows()).filter((row) => row.day === d5)).toEqual([])
    await advanceVaults(3600)
    await app.kassa.earning!.runOnce()
    expect(await marked()).toBe(1)
    expect((await accrualRows()).filter((row) => row.day === d5).map((row) => row.account_id).sort()).toEqual([alice, bob].sort())
  })
})
