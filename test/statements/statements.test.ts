import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import { newId } from '../../server/lib/ids.ts'
import { restartOnSameDatabase, startTestApp, type TestApp } from '../support/app.ts'
import { verifyStatementChain } from '../../server/modules/statements/verify.ts'
import { ManualWallClock, statementsFixture, type StatementsFixture } from './support.ts'

// Each test seals days on a database of its own; a busy shared host can take well over 5 s for that.
setDefaultTimeout(60_000)

// Sealing waits STATEMENT_SETTLE_SECONDS (60 in tests) after a cut-off.
const wall = new ManualWallClock(Date.parse('2027-01-10T09:00:00.000Z'))
let app: TestApp
let fx: StatementsFixture
let alice: string
let bob: string
let webhookId: string

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: wall.read })
  fx = await statementsFixture(app, wall, 'Statements Org')
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  const endpoint = await fx.call('POST', '/v1/webhooks', { url: 'https://hooks.example.com/kassa', events: ['statement.*'] })
  expect(endpoint.status).toBe(201)
  webhookId = endpoint.body.id
}, 60_000)
afterAll(async () => {
  await app.close()
}, 60_000)

async function count(table: string): Promise<number> {
  const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) as count from ${sql.identifier(table)} where org_id = ${fx.org.id}`)
  return Number(row!.count)
}

describe('sealing a business day', () => {
  test('each account gets a statement per asset: opening, the day\'s lines in booking order with balanceAfter, closing, invariantOk', async () => {
    fx.at('2027-01-10T10:00:00.000Z')
    await fx.fund(alice, '100')
    fx.at('2027-01-10T11:00:00.000Z')
    await fx.transfer(alice, bob, '30')
    // Not yet: the cut-off (00:00 UTC) has not passed.
    expect(await fx.seal()).toEqual([])
    fx.at('2027-01-11T00:00:59.999Z')
    expect(await fx.seal()).toEqual([])
    fx.at('2027-01-11T00:01:00.000Z')
    expect(await fx.seal()).toEqual([{ orgId: fx.org.id, businessDate: '2027-01-10', statements: 2 }])

    const [statement] = await fx.statements(alice)
    expect(statement).toMatchObject({
      object: 'statement',
      accountId: alice,
      asset: 'USDC',
      businessDate: '2027-01-10',
      timeZone: 'UTC',
      cutoffHour: 0,
      periodStart: '2027-01-10T00:00:00.000Z',
      periodEnd: '2027-01-11T00:00:00.000Z',
      openingBalance: '0.000000',
      closingBalance: '70.000000',
      ledgerBalanceAtCutoff: '70.000000',
      invariantOk: true,
      previousHash: null,
      previousStatementId: null,
    })
    expect(statement!.lines.map((line) => [line.kind, line.bookedAt, line.amount, line.balanceAfter])).toEqual([
      ['sandbox_funding', '2027-01-10T10:00:00.000Z', '100.000000', '100.000000'],
      ['transfer', '2027-01-10T11:00:00.000Z', '-30.000000', '70.000000'],
    ])
    const [bobs] = await fx.statements(bob)
    expect(bobs).toMatchObject({ openingBalance: '0.000000', closingBalance: '29.960000', invariantOk: true })
    expect(bobs!.lines.map((line) => line.amount)).toEqual(['29.960000'])
  })

  test('sealing a day again writes nothing new', async () => {
    const before = [await count('statements'), await count('statement_days'), await count('events')]
    expect(await fx.seal()).toEqual([])
    expect(await app.kassa.statements.sealer.sealOrganization(fx.org.id)).toEqual([])
    expect([await count('statements'), await count('statement_days'), await count('events')]).toEqual(before)
  })

  test('every sealed statement writes a statement.sealed event in the same commit', async () => {
    const rows = await queryRows<{ data: Record<string, unknown> }>(
      app.kassa.runtime.db,
      sql`select data from events where org_id = ${fx.org.id} and type = 'statement.sealed' order by seq`,
    )
    const [statement] = await fx.statements(alice)
    expect(rows).toHaveLength(2)
    expect(rows.map((row) => row.data)).toContainEqual({
      statementId: statement!.id,
      accountId: alice,
      asset: 'USDC',
      businessDate: '2027-01-10',
      openingBalance: '0.000000',
      closingBalance: '70.000000',
      lineCount: 2,
      invariantOk: true,
      hash: statement!.hash,
    })
    // The outbox fans them out to the endpoint subscribed to statement.* (this pass, or the
    // worker's own, whose cursor lock this one waits for).
    await app.kassa.webhooks.delivery!.worker.fanOut()
    const deliveries = await queryRows<{ count: string }>(
      app.kassa.runtime.db,
      sql`select count(*) as count from webhook_deliveries d join events e on e.id = d.event_id where e.type = 'statement.sealed' and d.webhook_id = ${webhookId}`,
    )
    expect(Number(deliveries[0]!.count)).toBe(2)
  })

  test('the cut-off edge: a movement booked one millisecond before it is in the day, one millisecond after in the next', async () => {
    fx.at('2027-01-11T23:59:59.999Z')
    await fx.fund(alice, '1')
    fx.at('2027-01-12T00:00:00.001Z')
    await fx.fund(alice, '2')
    await fx.advance(120)
    expect(await fx.seal()).toEqual([{ orgId: fx.org.id, businessDate: '2027-01-11', statements: 2 }])
    const day = (await fx.statements(alice, '?from=2027-01-11&to=2027-01-11'))[0]!
    expect(day.lines.map((line) => [line.bookedAt, line.amount])).toEqual([['2027-01-11T23:59:59.999Z', '1.000000']])
    // The movement after the cut-off had committed when the day was sealed, and is not in it: the
    // ledger at the cut-off leaves it out too.
    expect(day).toMatchObject({ openingBalance: '70.000000', closingBalance: '71.000000', ledgerBalanceAtCutoff: '71.000000', invariantOk: true })
    // Bob had no movement that day: his statement carries his balance over, with no lines.
    const bobs = (await fx.statements(bob, '?from=2027-01-11'))[0]!
    expect(bobs).toMatchObject({ openingBalance: '29.960000', closingBalance: '29.960000', lines: [], invariantOk: true })

    await fx.advance(24 * 3600)
    expect(await fx.seal()).toEqual([{ orgId: fx.org.id, businessDate: '2027-01-12', statements: 2 }])
    const next = (await fx.statements(alice, '?from=2027-01-12'))[0]!
    expect(next.lines.map((line) => [line.bookedAt, line.amount])).toEqual([['2027-01-12T00:00:00.001Z', '2.000000']])
    expect(next).toMatchObject({ openingBalance: '71.000000', closingBalance: '73.000000', invariantOk: true, previousStatementId: day.id, previousHash: day.hash })
  })

  test('a movement booked before a sealed cut-off that commits after the seal is stated on the next statement', async () => {
    // An operation decided at 23:59:58 on the 12th whose commit lands after the 12th was sealed.
    const bookedAt = new Date('2027-01-12T23:59:58.000Z')
    fx.at('2027-01-13T00:05:00.000Z')
    // The 12th was sealed at the end of the previous test.
    expect((await fx.statements(alice, '?from=2027-01-12&to=2027-01-12'))).toHaveLength(1)
    const id = newId('mv')
    await app.kassa.runtime.ledger.submit({
      orgId: fx.org.id,
      movementId: id,
      movementKind: 'sandbox_funding',
      reference: id,
      createdAt: bookedAt,
      postings: [
        { accountId: SYSTEM_ACCOUNTS.faucet, kind: 'system', bucket: 'available', asset: 'USDC', amountMinor: -5_000_000n },
        { accountId: alice, kind: 'customer', bucket: 'available', asset: 'USDC', amountMinor: 5_000_000n },
      ],
    })
    const sealedDay = (await fx.statements(alice, '?from=2027-01-12&to=2027-01-12'))[0]!
    expect(sealedDay.lines.map((line) => line.movementId)).not.toContain(id)
    await fx.advance(24 * 3600)
    await fx.seal()
    const next = (await fx.statements(alice, '?from=2027-01-13'))[0]!
    expect(next.lines.map((line) => [line.movementId, line.bookedAt, line.amount])).toEqual([[id, '2027-01-12T23:59:58.000Z', '5.000000']])
    expect(next).toMatchObject({ openingBalance: '73.000000', closingBalance: '78.000000', ledgerBalanceAtCutoff: '78.000000', invariantOk: true })
  })
})

/** The database's own message when it refuses a statement (drizzle wraps it); fails the test when it does not refuse. */
async function refusalOf(run: () => PromiseLike<unknown>): Promise<string> {
  try {
    await run()
  } catch (error) {
    const cause = (error as { cause?: { message?: string } }).cause
    return cause?.message ?? (error as Error).message
  }
  throw new Error('the database accepted the change')
}

describe('two instances', () => {
  test('sealing the same date from two instances at once writes it once', async () => {
    const second = await restartOnSameDatabase(app)
    try {
      await fx.advance(24 * 3600)
      const before = await count('statements')
      const [first, other] = await Promise.all([app.kassa.statements.sealer.runOnce(), second.statements.sealer.runOnce()])
      const sealed = [...first, ...other].filter((entry) => entry.orgId === fx.org.id)
      expect(sealed.map((entry) => entry.businessDate)).toEqual(['2027-01-14'])
      expect(await count('statements')).toBe(before + 2)
      expect(await count('statement_days')).toBe(5)
      const jwks = (await app.call('GET', '/.well-known/jwks.json')).body
      expect(await verifyStatementChain(await fx.statements(alice), jwks, { fromFirst: true })).toMatchObject({ ok: true, statements: 5 })
    } finally {
      for (const stop of second.runtime.stoppers.splice(0)) await stop()
    }
  }, 60_000)
})

describe('what makes a line', () => {
  test('a hold changes no total and is no line; its capture is, and the released rest is not', async () => {
    fx.at('2027-01-15T10:00:00.000Z')
    const hold = await fx.call('POST', '/v1/holds', { accountId: alice, asset: 'USDC', amount: '20', expiresInSeconds: 3600 })
    expect(hold.status).toBe(201)
    fx.at('2027-01-15T10:30:00.000Z')
    const captured = await fx.call('POST', `/v1/holds/${hold.body.id}/capture`, { destinationAccountId: bob, amount: '8' })
    expect(captured.status).toBe(200)
    await fx.advance(24 * 3600)
    await fx.seal()
    const [day] = await fx.statements(alice, '?from=2027-01-15&to=2027-01-15')
    expect(day!.lines.map((line) => [line.bookedAt, line.amount, line.reference])).toEqual([['2027-01-15T10:30:00.000Z', '-8.000000', captured.body.transferId]])
    expect(day).toMatchObject({ openingBalance: '78.000000', closingBalance: '70.000000', ledgerBalanceAtCutoff: '70.000000', invariantOk: true })
    expect(await fx.balance(alice)).toMatchObject({ total: '70.000000', held: '0.000000' })
  })
})

describe('immutability in the database', () => {
  for (const table of ['statements', 'statement_days', 'statement_signing_keys']) {
    test(`${table}: UPDATE, DELETE and TRUNCATE are refused by the database`, async () => {
      const db = app.kassa.runtime.db
      const run = (query: ReturnType<typeof sql>) => refusalOf(() => db.execute(query))
      const before = await queryRows(db, sql`select * from ${sql.identifier(table)} order by 1, 2`)
      expect(before.length).toBeGreaterThan(0)
      const column = table === 'statement_signing_keys' ? 'kid' : 'org_id'
      await expect(run(sql`update ${sql.identifier(table)} set ${sql.identifier(column)} = ${column === 'kid' ? 'x' : 'org_x'}`)).resolves.toMatch(/append-only/)
      await expect(run(sql`delete from ${sql.identifier(table)}`)).resolves.toMatch(/append-only/)
      await expect(run(sql.raw(`truncate ${table}`))).resolves.toMatch(/append-only/)
      expect(await queryRows(db, sql`select * from ${sql.identifier(table)} order by 1, 2`)).toEqual(before)
    })
  }

  test('a statement body changed by hand is refused too (closing balance of a sealed statement)', async () => {
    const db = app.kassa.runtime.db
    const update = () => refusalOf(() => db.execute(sql`update statements set closing_balance = closing_balance + 1 where org_id = ${fx.org.id}`))
    await expect(update()).resolves.toMatch(/append-only/)
  })
})
