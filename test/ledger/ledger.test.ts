import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { createApp } from '../../server/app.ts'
import { configForTests } from '../support/config.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, expectVerified, ledgerFixture, ledgerRowCounts, refusal, type LedgerFixture } from './support.ts'

let app: TestApp
let fx: LedgerFixture

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app)
})
afterAll(async () => {
  await app.close()
})

const transfer = (source: string, destination: string, amount: string) =>
  fx.call('POST', '/v1/transfers', { sourceAccountId: source, destinationAccountId: destination, asset: 'USDC', amount })

describe('sandbox funding', () => {
  test('credits from the faucet as a balanced movement', async () => {
    const account = await fx.mint('funded')
    const response = await fx.call('POST', `/v1/sandbox/accounts/${account}/fund`, { asset: 'USDT', amount: '12.5' })
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({ accountId: account, asset: 'USDT', amount: '12.500000', balance: { available: '12.500000', total: '12.500000' } })
    expect(app.kassa.runtime.ledger.balance(fx.org.id, 'system:faucet', 'USDT')?.available).toBe(-12_500_000n)
    await expectVerified(app)
  })

  test('needs a test key, refuses unsupported assets, and changes nothing when refused', async () => {
    const account = await fx.mint('unfunded')
    await expectRefusedWithoutChange(
      app,
      () => app.call('POST', `/v1/sandbox/accounts/${account}/fund`, { key: fx.org.publishableKey, body: { asset: 'USDC', amount: '1' } }),
      403,
      'permission_denied',
    )
    await expectRefusedWithoutChange(app, () => fx.call('POST', `/v1/sandbox/accounts/${account}/fund`, { asset: 'XRP', amount: '1' }), 422, 'unsupported_asset')
    await expectRefusedWithoutChange(app, () => fx.call('POST', `/v1/sandbox/accounts/${account}/fund`, { asset: 'USDC', amount: '0' }), 400, 'invalid_request')
  })

  test('does not exist in production', async () => {
    const production = await startTestApp({ serviceEnv: 'production' })
    try {
      const response = await production.call('POST', '/v1/sandbox/accounts/acct_00000000000000000000000000000000/fund', { body: { asset: 'USDC', amount: '1' } })
      expect(response.status).toBe(404)
    } finally {
      await production.close()
    }
  })
})

describe('concurrency', () => {
  test('of hundreds of simultaneous transfers and holds only those that fit succeed', async () => {
    const source = await fx.mint('contended')
    const sink = await fx.mint('sink')
    await fx.fund(source, '100')
    // Each request debits exactly 1.00 (inclusive fee for transfers; a hold reserves its amount).
    const requests = Array.from({ length: 300 }, (_, index) =>
      index % 2 === 0
        ? transfer(source, sink, '1')
        : fx.call('POST', '/v1/holds', { accountId: source, asset: 'USDC', amount: '1', expiresInSeconds: 600 }),
    )
    const responses = await Promise.all(requests)
    const succeeded = responses.filter((response) => response.status === 201)
    const refused = responses.filter((response) => response.status !== 201)
    expect(succeeded).toHaveLength(100)
    expect(new Set(refused.map((response) => `${response.status} ${response.body.error.code}`))).toEqual(new Set(['422 insufficient_available']))
    const holdsPlaced = succeeded.filter((response) => response.body.id.startsWith('hold_')).length
    expect(await fx.balance(source)).toMatchObject({ available: '0.000000', held: `${holdsPlaced}.000000`, total: `${holdsPlaced}.000000` })
    const counts = await queryRows<{ transfers: string; holds: string }>(
      app.kassa.runtime.db,
      sql`select (select count(*) from transfers where source_account_id = ${source}) as transfers, (select count(*) from holds where account_id = ${source}) as holds`,
    )
    expect(Number(counts[0]!.transfers) + Number(counts[0]!.holds)).toBe(100)
    const negative = await queryRows(app.kassa.runtime.db, sql`select 1 from ledger_balances where kind = 'customer' and (available < 0 or held < 0)`)
    expect(negative).toHaveLength(0)
    await expectVerified(app)
  })

  test('group commit puts simultaneous operations into fewer transactions than operations', async () => {
    const source = await fx.mint('batched')
    const sink = await fx.mint('batched-sink')
    await fx.fund(source, '1000')
    const writer = app.kassa.runtime.ledger.writer
    const batchesBefore = writer.committedBatches
    const operationsBefore = writer.committedOperations
    const responses = await Promise.all(Array.from({ length: 100 }, () => transfer(source, sink, '1')))
    expect(responses.every((response) => response.status === 201)).toBe(true)
    expect(writer.committedOperations - operationsBefore).toBe(100)
    expect(writer.committedBatches - batchesBefore).toBeLessThan(100)
  })
})

describe('commit failure', () => {
  test('fails every operation of the batch, restores memory to the database, and acknowledges nothing lost', async () => {
    const source = await fx.mint('failing')
    const sink = await fx.mint('failing-sink')
    await fx.fund(source, '50')
    const before = await ledgerRowCounts(app)
    const ledger = app.kassa.runtime.ledger
    const sourceBefore = { ...ledger.balance(fx.org.id, source, 'USDC')! }
    // Break the next commit from inside the database: a statement that fails mid-transaction.
    await app.kassa.runtime.db.execute(sql`create or replace function ledger_test_fail() returns trigger as $$ begin raise exception 'injected failure'; end; $$ language plpgsql`)
    await app.kassa.runtime.db.execute(sql`create trigger ledger_test_fail before insert on transfers for each row execute function ledger_test_fail()`)
    const responses = await Promise.all(Array.from({ length: 10 }, () => transfer(source, sink, '1')))
    await app.kassa.runtime.db.execute(sql`drop trigger ledger_test_fail on transfers`)
    expect(responses.map((response) => response.status)).toEqual(Array(10).fill(500))
    expect(await ledgerRowCounts(app)).toEqual(before)
    expect(ledger.balance(fx.org.id, source, 'USDC')).toEqual(sourceBefore)
    expect(ledger.balance(fx.org.id, sink, 'USDC')?.available ?? 0n).toBe(0n)
    const after = await transfer(source, sink, '1')
    expect(after.status).toBe(201)
    await expectVerified(app)
  })
})

describe('restart and verify', () => {
  test('memory is rebuilt from Postgres at start, holds included', async () => {
    const source = await fx.mint('restart')
    const sink = await fx.mint('restart-sink')
    await fx.fund(source, '20')
    await transfer(source, sink, '5')
    const hold = await fx.call('POST', '/v1/holds', { accountId: source, asset: 'USDC', amount: '3', expiresInSeconds: 600 })
    await app.kassa.runtime.ledger.drain()
    const second = await createApp(configForTests({ databaseUrl: app.config.databaseUrl }), { database: await app.database.open() })
    try {
      const ledger = second.runtime.ledger
      expect(ledger.balance(fx.org.id, source, 'USDC')).toEqual(app.kassa.runtime.ledger.balance(fx.org.id, source, 'USDC'))
      expect(ledger.balance(fx.org.id, source, 'USDC')).toMatchObject({ available: 12_000_000n, held: 3_000_000n, total: 15_000_000n })
      expect(ledger.holds.get(hold.body.id)?.amountMinor).toBe(3_000_000n)
    } finally {
      // On the embedded database both apps share one handle; only the runtime's loops are stopped here.
      for (const stop of second.runtime.stoppers.splice(0)) await stop()
    }
  })

  test('with group commit off every operation is its own transaction', async () => {
    const single = await startTestApp({ groupCommit: false })
    try {
      const org = await ledgerFixture(single, 'Single')
      const source = await org.mint('a')
      const sink = await org.mint('b')
      await org.fund(source, '10')
      const responses = await Promise.all(Array.from({ length: 20 }, () =>
        org.call('POST', '/v1/transfers', { sourceAccountId: source, destinationAccountId: sink, asset: 'USDC', amount: '1' }),
      ))
      expect(responses.filter((response) => response.status === 201)).toHaveLength(10)
      const writer = single.kassa.runtime.ledger.writer
      expect(writer.committedBatches).toBe(writer.committedOperations)
      await expectVerified(single)
    } finally {
      await single.close()
    }
  })

  test('the database refuses a movement whose legs are malformed', async () => {
    const db = app.kassa.runtime.db
    const before = await ledgerRowCounts(app)
    // Array literals as text: drizzle would spread a JavaScript array into a list of parameters.
    const literal = (values: string[]) => `{${values.join(',')}}`
    const insert = (accounts: string[], buckets: string[], assets: string[], amounts: string[]) =>
      refusal(() =>
        db.execute(sql`insert into ledger_movements (id, org_id, kind, reference, created_at, accounts, buckets, assets, amounts)
          values ('mv_malformed', 'org_x', 'test', 'ref', now(), ${literal(accounts)}::text[], ${literal(buckets)}::text[], ${literal(assets)}::text[], ${literal(amounts)}::numeric[])`),
      )
    expect(await insert(['acct_a', 'acct_b'], ['available', 'available'], ['USDC', 'USDC'], ['-5', '0'])).toContain('ledger_movements_amounts_nonzero')
    expect(await insert(['acct_a', 'acct_b'], ['available'], ['USDC', 'USDC'], ['-5', '5'])).toContain('ledger_movements_legs')
    expect(await insert(['acct_a'], ['available'], ['USDC'], ['5'])).toContain('ledger_movements_legs')
    expect(await insert(['acct_a', 'acct_b'], ['available', 'pending'], ['USDC', 'USDC'], ['-5', '5'])).toContain('ledger_movements_buckets')
    expect(await ledgerRowCounts(app)).toEqual(before)
  })

  test('verify finds a balance that no longer matches its postings, and history cannot be rewritten', async () => {
    const db = app.kassa.runtime.db
    expect(await refusal(() => db.execute(sql`update ledger_movements set amounts = array_append(amounts, 1)`))).toContain('append-only')
    expect(await refusal(() => db.execute(sql`delete from ledger_movements`))).toContain('append-only')
    const account = await fx.mint('tampered')
    await fx.fund(account, '1')
    await app.kassa.runtime.ledger.drain()
    // The row's own invariant is a check constraint: Postgres refuses a total that disagrees with its buckets.
    expect(await refusal(() => db.execute(sql`update ledger_balances set available = available + 1 where account_id = ${account}`))).toContain('ledger_balances_total')
    // A row consistent in itself but not with its postings is what verify finds.
    await db.execute(sql`update ledger_balances set available = available + 1, total = total + 1 where account_id = ${account}`)
    const report = await app.ops('GET', '/ops/v1/ledger/verify')
    expect(report.body.ok).toBe(false)
    expect(report.body.problems.map((problem: { check: string }) => problem.check).sort()).toEqual(['balance_matches_postings'])
    await db.execute(sql`update ledger_balances set available = available - 1, total = total - 1 where account_id = ${account}`)
    await expectVerified(app)
  })
})
