import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { stallWriter } from '../support/writer.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import type { SlowAuthorization } from '../../server/modules/payments/service.ts'
import { SLOW_AUTHORIZATIONS_KEPT_DEFAULT } from '../../server/config.ts'

interface SlowLogBody {
  thresholdMs: number
  recorded: number
  kept: number
  authorizations: SlowAuthorization[]
}

async function startWith(slowAuthorizationMs: number, slowAuthorizationsKept = SLOW_AUTHORIZATIONS_KEPT_DEFAULT): Promise<{ app: TestApp; fx: LedgerFixture; payer: string }> {
  const app = await startTestApp({ slowAuthorizationMs, slowAuthorizationsKept })
  const fx = await ledgerFixture(app)
  const payer = await fx.mint('card-holder')
  await fx.fund(payer, '100')
  return { app, fx, payer }
}

async function slowLog(app: TestApp): Promise<SlowLogBody> {
  const response = await app.ops('GET', '/ops/v1/payments/slow')
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
    expect(after.kept).toBe(after.authorizations.length)
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
      expect(await slowLog(app)).toEqual({ thresholdMs: 500, recorded: 0, kept: 0, authorizations: [] })
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
    } finally {
      await app.close()
    }
  })
})
