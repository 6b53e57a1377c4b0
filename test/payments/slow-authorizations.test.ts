import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { stallWriter } from '../support/writer.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import type { SlowAuthorization } from '../../server/modules/payments/slow.ts'
import { SLOW_AUTHORIZATIONS_KEPT_DEFAULT } from '../../server/config.ts'

interface SlowLogBody {
  thresholdMs: number
  recorded: number
  kept: number
  missed: number
  hasMore: boolean
  authorizations: Array<SlowAuthorization & { seq: number }>
}

async function startWith(slowAuthorizationMs: number, slowAuthorizationsKept = SLOW_AUTHORIZATIONS_KEPT_DEFAULT): Promise<{ app: TestApp; fx: LedgerFixture; payer: string }> {
  const app = await startTestApp({ slowAuthorizationMs, slowAuthorizationsKept })
  const fx = await ledgerFixture(app)
  const payer = await fx.mint('card-holder')
  await fx.fund(payer, '100')
  return { app, fx, payer }
}

async function slowLog(app: TestApp, query = ''): Promise<SlowLogBody> {
  const response = await app.ops('GET', `/ops/v1/payments/slow${query}`)
  expect(response.status).toBe(200)
  return response.body as SlowLogBody
}

/** The phases of an approval add up to its total (each rounded to a microsecond). */
function expectPhasesAddUp(entry: SlowAuthorization): void {
  const phases = entry.phases!
  expect(Object.values(phases).every((ms) => ms >= 0)).toBe(true)
  const sum = phases.beforeWriterMs + phases.queuedMs + phases.commitMs + phases.afterCommitMs
  expect(Math.abs(sum - entry.totalMs)).toBeLessThan(0.01)
}

describe('slow authorizations, every one kept (SLOW_AUTHORIZATION_MS=0)', () => {
  let app: TestApp
  let fx: LedgerFixture
  let payer: string
  beforeAll(async () => {
    ;({ app, fx, payer } = await startWith(0))
  })
  afterAll(async () => {
    await app.close()
  })
  const authorize = (amount: string) => fx.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount })

  test('an approval is kept with where its time went; a decline with its code and no phases; malformed requests are not kept', async () => {
    const before = await slowLog(app)
    expect(before.thresholdMs).toBe(0)
    const startedAtMs = Date.now()
    const approved = (await authorize('1')).body
    const declined = (await authorize('1000000')).body
    expect((await authorize('one')).status).toBe(400)
    expect([approved.state, declined.state]).toEqual(['authorized', 'declined'])

    const after = await slowLog(app)
    expect(after.recorded - before.recorded).toBe(2)
    const [approval, decline] = after.authorizations.slice(-2)
    expect(approval).toMatchObject({ paymentId: approved.id, state: 'authorized', failureCode: null, batchesAhead: 0 })
    expect(approval!.batchOperations).toBeGreaterThanOrEqual(1)
    expect(approval!.arrivedAtMs).toBeGreaterThanOrEqual(startedAtMs - 5)
    expect(approval!.arrivedAtMs).toBeLessThanOrEqual(Date.now())
    expectPhasesAddUp(approval!)
    expect(decline).toMatchObject({ paymentId: declined.id, state: 'declined', failureCode: declined.failureCode, phases: null, batchOperations: null, batchesAhead: null })
    expect(decline!.arrivedAtMs).toBeGreaterThanOrEqual(approval!.arrivedAtMs)
    expect(after.kept).toBe(after.recorded)
    expect(after.authorizations.map((entry) => entry.seq).slice(-2)).toEqual([after.recorded - 1, after.recorded])
    await fx.call('POST', `/v1/payments/${approved.id}/void`)
  })

  test('an answer replayed for its Idempotency-Key is kept as replayed, with no payment of its own', async () => {
    const send = () =>
      app.call('POST', '/v1/payments/authorize', { key: fx.org.testKey, body: { accountId: payer, asset: 'USDC', amount: '2' }, headers: { 'idempotency-key': `slow-replay-${payer}` } })
    const first = await send()
    const again = await send()
    expect([first.status, again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true'])
    const paymentId = first.body.id as string
    const [original, replayed] = (await slowLog(app)).authorizations.slice(-2)
    expect(original).toMatchObject({ paymentId, state: 'authorized', failureCode: null })
    expect(replayed).toMatchObject({ paymentId: null, state: 'replayed', failureCode: null, phases: null })
    await fx.call('POST', `/v1/payments/${paymentId}/void`)
  })

  test("a commit held back shows in its approval's commit phase", async () => {
    const open = stallWriter(app.kassa.runtime.ledger.writer)
    const pending = authorize('1')
    await Bun.sleep(80)
    open()
    const approved = (await pending).body
    expect(approved.state).toBe('authorized')
    const held = (await slowLog(app)).authorizations.find((entry) => entry.paymentId === approved.id)!
    expectPhasesAddUp(held)
    expect(held.phases!.commitMs).toBeGreaterThanOrEqual(70)
    expect(held.totalMs).toBeGreaterThanOrEqual(80)
    await fx.call('POST', `/v1/payments/${approved.id}/void`)
  })

  test('operators only', async () => {
    expect((await fx.call('GET', '/ops/v1/payments/slow')).status).toBe(401)
  })
})

describe('slow authorizations, above the threshold only', () => {
  test('authorizations answered under SLOW_AUTHORIZATION_MS are counted nowhere in the log', async () => {
    const { app, fx, payer } = await startWith(500)
    try {
      for (const amount of ['1', '2', '1000000']) await fx.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount })
      expect(await slowLog(app)).toEqual({ thresholdMs: 500, recorded: 0, kept: 0, missed: 0, hasMore: false, authorizations: [] })
    } finally {
      await app.close()
    }
  })

  test('the log keeps a bounded number by default', () => {
    expect(SLOW_AUTHORIZATIONS_KEPT_DEFAULT).toBe(4096)
  })

  test('SLOW_AUTHORIZATIONS_KEPT bounds the log: the newest are kept, every one counted', async () => {
    const { app, fx, payer } = await startWith(0, 2)
    try {
      const ids: string[] = []
      for (const amount of ['1', '2', '3']) {
        const response = await fx.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount })
        expect(response.status).toBe(201)
        ids.push((response.body as { id: string }).id)
      }
      const log = await slowLog(app)
      expect(log.recorded).toBe(3)
      expect(log.kept).toBe(2)
      expect(log.authorizations.map((entry) => entry.paymentId)).toEqual(ids.slice(1))
      // A cursor from before the oldest kept: what is kept, and how many after it were overwritten.
      const fromStart = await slowLog(app, '?after=0')
      expect([fromStart.missed, fromStart.hasMore, fromStart.authorizations.map((entry) => [entry.seq, entry.paymentId])]).toEqual([1, false, [[2, ids[1]!], [3, ids[2]!]]])
    } finally {
      await app.close()
    }
  })
})

describe('slow authorizations, a page at a time', () => {
  let app: TestApp
  let fx: LedgerFixture
  let payer: string
  const ids: string[] = []
  beforeAll(async () => {
    ;({ app, fx, payer } = await startWith(0))
    for (let index = 0; index < 7; index++) {
      const response = await fx.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount: '0.01' })
      expect(response.status).toBe(201)
      ids.push((response.body as { id: string }).id)
    }
  })
  afterAll(async () => {
    await app.close()
  })

  test('without a cursor, the newest page; with one, those after it, page by page to the newest', async () => {
    const newest = await slowLog(app, '?limit=3')
    expect(newest.recorded).toBe(7)
    expect([newest.kept, newest.hasMore, newest.missed]).toEqual([7, false, 0])
    expect(newest.authorizations.map((entry) => [entry.seq, entry.paymentId])).toEqual([[5, ids[4]!], [6, ids[5]!], [7, ids[6]!]])
    // The default page holds them all here (100).
    expect((await slowLog(app)).authorizations.map((entry) => entry.paymentId)).toEqual(ids)
    const pages: string[][] = []
    let after = 0
    for (;;) {
      const page = await slowLog(app, `?after=${after}&limit=3`)
      pages.push(page.authorizations.map((entry) => entry.paymentId!))
      if (!page.hasMore) break
      after = page.authorizations.at(-1)!.seq
    }
    expect(pages).toEqual([ids.slice(0, 3), ids.slice(3, 6), ids.slice(6)])
    expect((await slowLog(app, '?after=7')).authorizations).toEqual([])
  })

  test('a page size or cursor out of range is refused with the field named, and nothing is read', async () => {
    for (const [query, field] of [
      ['?limit=0', 'limit'],
      ['?limit=1001', 'limit'],
      ['?after=-1', 'after'],
      ['?after=8', 'after'],
      ['?after=1.5', 'after'],
      ['?after=first', 'after'],
      ['?limit=ten', 'limit'],
    ] as const) {
      const response = await app.ops('GET', `/ops/v1/payments/slow${query}`)
      expect([query, response.status]).toEqual([query, 400])
      expect(response.body.error).toMatchObject({ code: 'invalid_request', field })
    }
    expect((await app.ops('GET', '/ops/v1/payments/slow?cursor=1')).status).toBe(400)
    expect((await slowLog(app, '?limit=1000')).authorizations).toHaveLength(7)
  })
})
