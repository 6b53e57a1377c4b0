import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { pgTable, text } from 'drizzle-orm/pg-core'
import { queryRows } from '../../db/client.ts'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import type { WriteSet } from '../../server/ledger/write-sets.ts'
import type { LedgerOperation } from '../../server/ledger/writer.ts'
import { AssertionError } from '../../server/lib/assert.ts'
import { newId } from '../../server/lib/ids.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { stallWriter } from '../support/writer.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from './support.ts'

/**
 * Write sets as data: a table the ledger has never heard of, registered the way a module registers
 * its own, committed in the batch statement with the money it goes with.
 */
const marks = pgTable('kassa_test_marks', { id: text('id').primaryKey(), note: text('note').notNull() })

/** An upsert without "last state per id wins": two operations of one batch may write the same row. */
const MARKS: WriteSet = { name: 'marks', field: 'marks' as WriteSet['field'], table: marks, order: 900, upsert: { target: 'id', columns: ['note'] } }

let app: TestApp
let fx: LedgerFixture

beforeAll(async () => {
  // One batch in flight at a time, so that operations queued behind one go out together.
  app = await startTestApp({ ledgerPipelineDepth: 1 })
  fx = await ledgerFixture(app, 'Write Sets Org')
  await app.kassa.runtime.db.execute(sql`create table kassa_test_marks (id text primary key, note text not null)`)
  app.kassa.runtime.ledger.registerWriteSets([MARKS])
})
afterAll(async () => {
  await app.close()
})

const ledger = () => app.kassa.runtime.ledger

/** A faucet credit carrying rows of `field`. */
function credit(accountId: string, amountMinor: bigint, rows: Record<string, unknown[]>): LedgerOperation & { movementId: string } {
  const movementId = newId('mv')
  return {
    orgId: fx.org.id,
    movementId,
    movementKind: 'sandbox_funding',
    reference: movementId,
    createdAt: new Date(),
    postings: [
      { accountId, kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor },
      { accountId: SYSTEM_ACCOUNTS.faucet, kind: 'system', bucket: 'available', asset: 'USDC', amountMinor: -amountMinor },
    ],
    ...rows,
  } as LedgerOperation & { movementId: string }
}

async function movementsWritten(ids: string[]): Promise<number> {
  const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) as count from ledger_movements where id in ${ids}`)
  return Number(row!.count)
}

describe('write sets', () => {
  test("a registered write set's rows commit in the batch with their movement", async () => {
    const account = await fx.mint('marked')
    const id = newId('mv')
    const op = credit(account, 5n, { marks: [{ id, note: 'first' }] })
    await ledger().submit(op)
    expect(await movementsWritten([op.movementId])).toBe(1)
    expect(await queryRows(app.kassa.runtime.db, sql`select id, note from kassa_test_marks where id = ${id}`)).toEqual([{ id, note: 'first' }])
  })

  test('two operations of one batch upserting the same row both commit: the batch is bisected, not failed whole', async () => {
    const account = await fx.mint('same-row')
    const id = newId('mv')
    await app.kassa.runtime.db.execute(sql`insert into kassa_test_marks (id, note) values (${id}, 'before')`)
    // A batch held in flight, so that the two operations queue behind it and go out as one batch.
    const release = stallWriter(app.kassa.runtime.ledger.writer)
    const ahead = ledger().submit(credit(account, 1n, {}))
    const first = credit(account, 2n, { marks: [{ id, note: 'first' }] })
    const second = credit(account, 3n, { marks: [{ id, note: 'second' }] })
    const both = [ledger().submit(first), ledger().submit(second)].map((promise) => promise.then(() => 'committed', (error: unknown) => String(error)))
    expect(ledger().writer.pendingCount()).toBe(2)
    release()
    await ahead
    // One statement cannot upsert one row twice (SQLSTATE 21000): each commits alone, in queue order.
    expect(await Promise.all(both)).toEqual(['committed', 'committed'])
    expect(await movementsWritten([first.movementId, second.movementId])).toBe(2)
    expect(await queryRows(app.kassa.runtime.db, sql`select note from kassa_test_marks where id = ${id}`)).toEqual([{ note: 'second' }])
    expect(await fx.balance(account)).toMatchObject({ available: '0.000006' })
    await expectVerified(app)
  })

  test('an operation carrying rows no write set takes is refused before anything is reserved', async () => {
    const account = await fx.mint('unregistered')
    const before = ledger().balance(fx.org.id, account, 'USDC')
    const op = credit(account, 7n, { unknownRows: [{ id: 'x' }] })
    expect(() => ledger().submit(op)).toThrow(AssertionError)
    expect(() => ledger().submit(op)).toThrow('no write set for unknownRows is registered')
    expect(ledger().balance(fx.org.id, account, 'USDC')).toEqual(before)
    expect(await movementsWritten([op.movementId])).toBe(0)
  })

  test('a write set is refused at registration when its name is taken or is one of the statement\'s own parts', () => {
    expect(() => ledger().registerWriteSets([{ ...MARKS, order: 901 }])).toThrow('already registered')
    expect(() => ledger().registerWriteSets([{ ...MARKS, name: 'guard', order: 902 }])).toThrow('not a free lower-case SQL name')
    expect(() => ledger().registerWriteSets([{ ...MARKS, name: 'marks_again', order: 900 }])).toThrow('share the order 900')
  })
})
