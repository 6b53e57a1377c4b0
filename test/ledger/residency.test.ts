import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { Kassa } from '../../server/app.ts'
import { callApp, restartOnSameDatabase, startTestApp, type TestApp, type TestOrg } from '../support/app.ts'
import { expectVerified } from './support.ts'

// Accounts become resident on first touch; start-up loads only system balances and the accounts
// holding a reservation. These tests force each path with a few thousand idle accounts inserted
// straight into the tables (as a large partner's data would be), and check balances after each.
const IDLE_ACCOUNTS = 3000
const FUNDED_MINOR = 25_000_000n

let app: TestApp
let org: TestOrg
let current: Kassa
const idle: string[] = []

const call = (method: string, path: string, body?: unknown, kassa = current) => callApp(kassa, method, path, { key: org.testKey, body })
const resident = (kassa = current) => kassa.runtime.ledger.accounts.residentCount()

const formatMinor = (minor: bigint) => `${minor / 1_000_000n}.${(minor % 1_000_000n).toString().padStart(6, '0')}`

async function availableOf(accountId: string, kassa = current): Promise<string> {
  const response = await call('GET', `/v1/accounts/${accountId}/balances`, undefined, kassa)
  expect(response.status).toBe(200)
  return response.body.balances.find((entry: { asset: string }) => entry.asset === 'USDC').available
}

/** A new instance on the same database, as after a restart (the old one's loops stopped; the handles close with the database). */
async function restart(): Promise<void> {
  current = await restartOnSameDatabase({ ...app, kassa: current })
}

beforeAll(async () => {
  app = await startTestApp()
  current = app.kassa
  org = await app.createOrg('Residency Org')
  // The faucet's side of the funding, so the ledger balances and verify holds over the inserted rows.
  for (let index = 0; index < IDLE_ACCOUNTS; index++) idle.push(`acct_idle${String(index).padStart(6, '0')}`)
  const db = app.kassa.runtime.db
  const now = new Date().toISOString()
  const ids = sql`select 'acct_idle' || lpad(g::text, 6, '0') as a from generate_series(0, ${IDLE_ACCOUNTS - 1}) as g`
  const funded = FUNDED_MINOR.toString()
  const faucet = (-FUNDED_MINOR * BigInt(IDLE_ACCOUNTS)).toString()
  await queryRows(db, sql`insert into accounts (id, org_id, external_id, type, metadata, status, created_at)
    select a, ${org.id}, 'ext-' || a, 'individual', '{}'::jsonb, 'active', ${now}::timestamptz from (${ids}) as t`)
  // Each account's funding as a movement from the faucet, so verify holds over the inserted rows.
  await queryRows(db, sql`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
    select 'mv_seed_' || a, ${org.id}, 'sandbox_funding', 'mv_seed_' || a, ${now}::timestamptz, array[a, 'system:faucet'], array['available', 'available'],
      array['USDC', 'USDC'], array[${funded}::numeric, -${funded}::numeric] from (${ids}) as t`)
  await queryRows(db, sql`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
    select ${org.id}, a, 'USDC', 'customer', ${funded}::numeric, 0, 0, ${funded}::numeric, ${now}::timestamptz from (${ids}) as t`)
  await queryRows(db, sql`insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
    values (${org.id}, 'system:faucet', 'USDC', 'system', ${faucet}::numeric, 0, 0, ${faucet}::numeric, ${now}::timestamptz)`)
  await restart()
})

afterAll(async () => {
  await current.runtime.ledger.drain()
  for (const stop of current.runtime.stoppers.splice(0)) await stop()
  await app.close()
})

describe('accounts resident on first touch', () => {
  test('a restart makes no idle account resident', () => {
    expect(resident()).toBe(0)
  })

  test('the first read of an idle account loads its balance exactly', async () => {
    expect(await availableOf(idle[0]!)).toBe('25.000000')
    expect(resident()).toBe(1)
  })

  test('a transfer between two accounts never touched before decides on their real balances', async () => {
    const response = await call('POST', '/v1/transfers', { sourceAccountId: idle[1], destinationAccountId: idle[2], asset: 'USDC', amount: '24.5' })
    expect(response.status).toBe(201)
    expect(await availableOf(idle[1]!)).toBe('0.500000')
    // The fee comes out of the amount (the inclusive default): the destination gets the rest.
    const received = 24_500_000n - BigInt(Math.round(Number(response.body.fee) * 1e6))
    expect(await availableOf(idle[2]!)).toBe(formatMinor(25_000_000n + received))
    // An amount above the real balance is refused, not decided against an unloaded zero or an unloaded surplus.
    const refused = await call('POST', '/v1/transfers', { sourceAccountId: idle[3], destinationAccountId: idle[4], asset: 'USDC', amount: '25.000001' })
    expect(refused.status).toBe(422)
    expect(refused.body.error.code).toBe('insufficient_available')
    expect(await availableOf(idle[3]!)).toBe('25.000000')
  })

  test('many first touches at once read each account once and lose no reservation', async () => {
    const sources = idle.slice(100, 400)
    const answers = await Promise.all(
      sources.flatMap((source) => [
        call('POST', '/v1/transfers', { sourceAccountId: source, destinationAccountId: idle[5], asset: 'USDC', amount: '15' }),
        call('POST', '/v1/transfers', { sourceAccountId: source, destinationAccountId: idle[5], asset: 'USDC', amount: '15' }),
      ]),
    )
    // Each source holds 25: exactly one of its two transfers of 15 goes through.
    expect(answers.filter((answer) => answer.status === 201)).toHaveLength(sources.length)
    expect(answers.filter((answer) => answer.status === 422)).toHaveLength(sources.length)
    for (const source of sources.slice(0, 20)) expect(await availableOf(source)).toBe('10.000000')
    let received = 0n
    for (const answer of answers) if (answer.status === 201) received += 15_000_000n - BigInt(Math.round(Number(answer.body.fee) * 1e6))
    expect(await availableOf(idle[5]!)).toBe(formatMinor(25_000_000n + received))
  })

  test('an account holding a reservation is resident after a restart, and its capture finds it', async () => {
    const held = idle[10]!
    const hold = await call('POST', '/v1/holds', { accountId: held, asset: 'USDC', amount: '7', expiresInSeconds: 3600 })
    expect(hold.status).toBe(201)
    await restart()
    expect(current.runtime.ledger.accounts.isResident(held)).toBe(true)
    expect(resident()).toBe(1)
    expect(current.runtime.ledger.accounts.isResident(idle[11]!)).toBe(false)
    const captured = await call('POST', `/v1/holds/${hold.body.id}/capture`, { destinationAccountId: idle[11], amount: '7' })
    expect(captured.status).toBe(200)
    const balances = (await call('GET', `/v1/accounts/${held}/balances`)).body.balances.find((entry: { asset: string }) => entry.asset === 'USDC')
    expect(balances).toMatchObject({ available: '18.000000', held: '0.000000', total: '18.000000' })
    const transfer = await call('GET', `/v1/transfers/${captured.body.transferId}`)
    const fee = BigInt(Math.round(Number(transfer.body.fee) * 1e6))
    expect(await availableOf(idle[11]!)).toBe(formatMinor(32_000_000n - fee))
  })

  test('after all that, every balance in Postgres equals memory and the ledger verifies', async () => {
    await current.runtime.ledger.drain()
    const rows = await queryRows<{ account_id: string; available: string }>(
      current.runtime.db,
      sql`select account_id, available::text from ledger_balances where org_id = ${org.id} and kind = 'customer'`,
    )
    for (const row of rows) {
      const memory = current.runtime.ledger.balance(org.id, row.account_id, 'USDC')
      if (memory !== undefined) expect(memory.available.toString()).toBe(row.available)
    }
    await expectVerified({ ...app, kassa: current })
  })
})
