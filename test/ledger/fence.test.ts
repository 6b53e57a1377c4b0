import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { TextStatement } from '../../db/bulk.ts'
import type { CommitFence } from '../../server/ledger/fence.ts'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import { openLedger, type Ledger } from '../../server/ledger/ledger.ts'
import type { GuardedWrite, LedgerOperation } from '../../server/ledger/writer.ts'
import { ApiError } from '../../server/lib/errors.ts'
import { accountRows } from '../../server/modules/accounts/ledger-rows.ts'
import { eventRow, eventWriteSets } from '../../server/modules/events/write-sets.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectVerified, faucetCredit, ledgerFixture, type LedgerFixture } from './support.ts'

/**
 * The commit fence (server/ledger/fence.ts), backed here by a tiny table of the organizations this
 * instance may write for: a second ledger over the test's database is built with it, and the table's
 * rows decide whether its commits may land.
 */
const FENCE: CommitFence = {
  condition: `not exists (select 1 from jsonb_array_elements_text(:fence::jsonb) as o(org_id)
    where not exists (select 1 from kassa_test_fence f where f.org_id = o.org_id))`,
  parameter: (orgIds) => JSON.stringify([...orgIds]),
}

let app: TestApp
let fx: LedgerFixture
/** An organization only the app's own ledger writes for (two ledgers writing one balance would each find the other's commits). */
let plain: LedgerFixture
let fenced: Ledger

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app, 'Fence Org')
  plain = await ledgerFixture(app, 'Plain Org')
  await app.kassa.runtime.db.execute(sql`create table kassa_test_fence (org_id text primary key)`)
  await app.kassa.runtime.db.execute(sql`create table kassa_test_guarded (id text primary key)`)
  // The faucet's balance row exists before the fenced ledger loads the system balances.
  await fx.fund(await fx.mint('fence-seed'), '1')
  fenced = await openLedger(app.kassa.runtime.db, { groupCommit: true, accounts: accountRows, fence: FENCE })
  fenced.registerWriteSets(eventWriteSets)
})
afterAll(async () => {
  await fenced?.drain()
  await app.close()
})

async function own(owned: boolean): Promise<void> {
  if (owned) await app.kassa.runtime.db.execute(sql`insert into kassa_test_fence (org_id) values (${fx.org.id}) on conflict do nothing`)
  else await app.kassa.runtime.db.execute(sql`delete from kassa_test_fence where org_id = ${fx.org.id}`)
}

/** A new account of the organization, resident in the fenced ledger. */
async function account(name: string): Promise<string> {
  const id = await fx.mint(name)
  await fenced.accounts.loadMany([id])
  return id
}

/** A faucet credit with an event, found again by its movement id. */
function credit(accountId: string, amountMinor: bigint, extra: Partial<LedgerOperation> = {}): LedgerOperation & { movementId: string } {
  return faucetCredit(fx.org.id, accountId, amountMinor, extra)
}

async function movementsWritten(ids: string[]): Promise<number> {
  const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) as count from ledger_movements where id in ${ids}`)
  return Number(row!.count)
}

/** The fenced ledger's memory of each balance it touched equals the database's row. */
async function expectMemoryEqualsDatabase(accountIds: string[]): Promise<void> {
  await fenced.drain()
  for (const accountId of [...accountIds, SYSTEM_ACCOUNTS.faucet]) {
    const [row] = await queryRows<{ available: string; held: string; in_flight: string; total: string }>(
      app.kassa.runtime.db,
      sql`select available::text, held::text, in_flight::text, total::text from ledger_balances where org_id = ${fx.org.id} and account_id = ${accountId} and asset = 'USDC'`,
    )
    const memory = fenced.balance(fx.org.id, accountId, 'USDC')
    expect({ accountId, memory: memory && [memory.available, memory.held, memory.inFlight, memory.total].map(String) }).toEqual({
      accountId,
      // A balance never written is zero in memory and has no row yet.
      memory: row ? [row.available, row.held, row.in_flight, row.total] : ['0', '0', '0', '0'],
    })
  }
}

async function refusalOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  return 'committed'
}

function expectFenceRefusal(error: unknown): void {
  expect(error).toBeInstanceOf(ApiError)
  expect({ code: (error as ApiError).code, message: (error as ApiError).message }).toEqual({
    code: 'partner_unavailable',
    message: 'this instance no longer owns the organization; nothing was applied; retry',
  })
}

describe('the commit fence', () => {
  test('a batch commits while the fence holds, and is refused with nothing written once it does not', async () => {
    const target = await account('fence-batch')
    await own(true)
    const first = credit(target, 1_000_000n)
    await fenced.submit(first)
    expect(await movementsWritten([first.movementId])).toBe(1)

    await own(false)
    // Several operations queued at once: one batch (and whatever queues behind it) fails closed.
    const refused = [credit(target, 2n), credit(target, 3n), credit(target, 5n)]
    const outcomes = await Promise.all(refused.map((op) => refusalOf(fenced.submit(op))))
    for (const outcome of outcomes) expectFenceRefusal(outcome)
    expect(await movementsWritten(refused.map((op) => op.movementId))).toBe(0)
    await expectMemoryEqualsDatabase([target])
    expect(fenced.balance(fx.org.id, target, 'USDC')?.available).toBe(1_000_000n)

    // Owned again: the writer commits again (a fresh order guard after the refusal).
    await own(true)
    const again = credit(target, 7n)
    await fenced.submit(again)
    expect(await movementsWritten([again.movementId])).toBe(1)
    await expectMemoryEqualsDatabase([target])
    expect(fenced.writer.invariantBreaches).toBe(0)
  })

  test('a batch with guarded writes checks the fence first in its transaction, and is refused and rolled back when it does not hold', async () => {
    const target = await account('fence-guarded')
    const guardedId = crypto.randomUUID()
    const guarded: GuardedWrite = {
      write: async (tx) => {
        await tx.execute(sql`insert into kassa_test_guarded (id) values (${guardedId})`)
        return true
      },
      refusal: () => new ApiError('conflict', 'guarded write refused'),
    }
    await own(false)
    const op = credit(target, 11n, { guardedWrites: [guarded] })
    expectFenceRefusal(await refusalOf(fenced.submit(op)))
    expect(await movementsWritten([op.movementId])).toBe(0)
    const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) as count from kassa_test_guarded where id = ${guardedId}`)
    expect(Number(row!.count)).toBe(0)
    await expectMemoryEqualsDatabase([target])

    await own(true)
    const allowed = credit(target, 13n, { guardedWrites: [guarded] })
    await fenced.submit(allowed)
    expect(await movementsWritten([allowed.movementId])).toBe(1)
    await expectMemoryEqualsDatabase([target])
  })

  test('a bundle committed aside checks the fence first in its transaction', async () => {
    const target = await account('fence-bundle')
    const guarded: GuardedWrite = { write: async () => true, refusal: () => new ApiError('conflict', 'guarded write refused') }
    await own(false)
    const bundle = [credit(target, 17n, { events: undefined }), credit(target, 19n, { events: undefined })]
    expectFenceRefusal(await refusalOf(fenced.submitBundle(bundle, [guarded])))
    expect(await movementsWritten(bundle.map((op) => op.movementId))).toBe(0)
    await expectMemoryEqualsDatabase([target])

    await own(true)
    const allowed = [credit(target, 23n, { events: undefined })]
    await fenced.submitBundle(allowed, [guarded])
    expect(await movementsWritten(allowed.map((op) => op.movementId))).toBe(1)
    await expectMemoryEqualsDatabase([target])
    await expectVerified(app)
  })

  test('the batch statement carries the condition only when a fence is configured', async () => {
    const texts = (ledger: Ledger) => {
      const seen: string[] = []
      const writer = ledger.writer as unknown as { batchStatement(flight: unknown): TextStatement }
      const build = writer.batchStatement.bind(writer)
      writer.batchStatement = (flight: unknown) => {
        const statement = build(flight)
        seen.push(statement.text)
        return statement
      }
      return { seen, restore: () => delete (writer as { batchStatement?: unknown }).batchStatement }
    }
    await own(true)
    const target = await account('fence-text')
    const withFence = texts(fenced)
    await fenced.submit(credit(target, 29n))
    withFence.restore()
    const plainTarget = await plain.mint('plain-text')
    const plainCredit = credit(plainTarget, 31n)
    plainCredit.orgId = plain.org.id
    plainCredit.events = [eventRow(plain.org.id, 'account.funded', { accountId: plainTarget }, new Date())]
    const plainLedger = texts(app.kassa.runtime.ledger)
    await app.kassa.runtime.ledger.submit(plainCredit)
    plainLedger.restore()
    expect(withFence.seen.length).toBe(1)
    expect(withFence.seen[0]).toContain('kassa_test_fence')
    expect(plainLedger.seen.length).toBe(1)
    expect(plainLedger.seen[0]).not.toContain('kassa_test_fence')
    expect(plainLedger.seen[0]).not.toContain('commit fence')
    await expectVerified(app)
  })
})
