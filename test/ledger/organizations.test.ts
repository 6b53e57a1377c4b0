import { afterAll, beforeAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from './support.ts'

// What cluster mode asks of the ledger when an organization's owner changes: forget one
// organization's memory without touching another's, and read it again from the database.
let app: TestApp
let moved: LedgerFixture
let stays: LedgerFixture

beforeAll(async () => {
  app = await startTestApp()
  moved = await ledgerFixture(app, 'Moved')
  stays = await ledgerFixture(app, 'Stays')
})
afterAll(async () => {
  await app.close()
})

test('forgetting an organization drops its accounts, balances and pending holds only; loading it reads them back as the database has them', async () => {
  const ledger = app.kassa.runtime.ledger
  const holder = await moved.mint('holder')
  const idle = await moved.mint('idle')
  await moved.fund(holder, '100')
  await moved.fund(idle, '5')
  const hold = await moved.call('POST', '/v1/holds', { accountId: holder, asset: 'USDC', amount: '30', expiresInSeconds: 3600 })
  expect(hold.status).toBe(201)
  const other = await stays.mint('other')
  await stays.fund(other, '7')
  await ledger.drain()

  ledger.forgetOrganizations(new Set([moved.org.id]))
  expect(ledger.accounts.isResident(holder)).toBe(false)
  expect(ledger.accounts.isResident(idle)).toBe(false)
  expect(ledger.balance(moved.org.id, holder, 'USDC')).toBeUndefined()
  expect(ledger.balance(moved.org.id, 'system:faucet', 'USDC')).toBeUndefined()
  expect(ledger.holds.get(hold.body.id)).toBeUndefined()
  // The other organization is as it was.
  expect(ledger.accounts.isResident(other)).toBe(true)
  expect(ledger.balance(stays.org.id, other, 'USDC')?.available).toBe(7_000_000n)

  // Another owner's commit meanwhile, straight into the database: what a load must see.
  await queryRows(app.kassa.runtime.db, sql`update ledger_balances set available = available - 1000000, total = total - 1000000 where account_id = ${idle} and asset = 'USDC'`)
  await queryRows(app.kassa.runtime.db, sql`update ledger_balances set available = available + 1000000, total = total + 1000000 where account_id = ${holder} and asset = 'USDC'`)

  await ledger.loadOrganizations([moved.org.id])
  // The account holding a reservation and the system accounts are resident again; the idle one on its first touch.
  expect(ledger.accounts.isResident(holder)).toBe(true)
  expect(ledger.accounts.isResident(idle)).toBe(false)
  expect(ledger.balance(moved.org.id, holder, 'USDC')).toMatchObject({ available: 71_000_000n, held: 30_000_000n })
  expect(ledger.balance(moved.org.id, 'system:faucet', 'USDC')?.available).toBe(-105_000_000n)
  expect(ledger.holds.get(hold.body.id)?.amountMinor).toBe(30_000_000n)
  expect((await moved.balance(idle)).available).toBe('4.000000')

  // Put back what the straight update moved, so that every balance equals its movements again,
  // and load once more: what is decided next is decided on what was read.
  await queryRows(app.kassa.runtime.db, sql`update ledger_balances set available = available + 1000000, total = total + 1000000 where account_id = ${idle} and asset = 'USDC'`)
  await queryRows(app.kassa.runtime.db, sql`update ledger_balances set available = available - 1000000, total = total - 1000000 where account_id = ${holder} and asset = 'USDC'`)
  await ledger.loadOrganizations([moved.org.id])
  expect((await moved.call('POST', `/v1/holds/${hold.body.id}/capture`, { destinationAccountId: idle })).status).toBe(200)
  expect((await moved.call('POST', '/v1/transfers', { sourceAccountId: holder, destinationAccountId: idle, asset: 'USDC', amount: '70' })).status).toBe(201)
  expect((await moved.call('POST', '/v1/transfers', { sourceAccountId: holder, destinationAccountId: idle, asset: 'USDC', amount: '0.000001' })).status).toBe(422)
  await expectVerified(app)
})
