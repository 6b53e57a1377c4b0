import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { fundedCardHolder } from './support.ts'
import type { TestApp } from '../support/app.ts'
import type { LedgerFixture } from '../ledger/support.ts'

/**
 * A listening server answers `POST /v1/payments/authorize` in front of Elysia
 * (server/modules/payments/front.ts); the app keeps its own route for `app.handle`. The two must give
 * the same answer to every request: same status, same headers (their names and values, but for the
 * request id and the count left), same body (but for the ids each answer makes new).
 */
let app: TestApp
let fx: LedgerFixture
let payer: string
/** The wall clock, pinned by a test whose counts must stay in one rate window (60 s, on the wall clock). */
let pinnedWallMs: number | undefined

beforeAll(async () => {
  ;({ app, fx, payer } = await fundedCardHolder({ wallClockMs: () => pinnedWallMs ?? Date.now() }))
})
afterAll(async () => {
  await app?.close()
})

interface Sent {
  key?: string
  headers?: Record<string, string>
  body?: string
}

function request(sent: Sent): Request {
  const headers = new Headers({ 'content-type': 'application/json', ...sent.headers })
  if (sent.key !== undefined) headers.set('authorization', `Bearer ${sent.key}`)
  return new Request('http://kassa.test/v1/payments/authorize', { method: 'POST', headers, body: sent.body })
}

/** What must agree between the two answers: ids made per answer are masked. */
async function shape(response: Response): Promise<{ status: number; headers: Record<string, string>; body: unknown }> {
  const headers: Record<string, string> = {}
  response.headers.forEach((value, name) => {
    headers[name] = name === 'x-request-id' ? value.replace(/^req_[0-9a-f]+$/, 'req_*') : name === 'x-ratelimit-remaining' ? '*' : value
  })
  const text = await response.text()
  const masked = text.replace(/"(pay|hold|req|evt)_[0-9a-f]+"/g, '"$1_*"').replace(/"(createdAt|expiresAt|updatedAt|closedAt)":"[^"]+"/g, '"$1":"*"')
  return { status: response.status, headers, body: masked === '' ? '' : JSON.parse(masked) }
}

/** The same request through the front (as a listening server answers it) and through the app's own route. */
async function bothWays(sent: Sent) {
  const front = await shape(await app.kassa.handle(request(sent)))
  const route = await shape(await app.kassa.app.handle(request(sent)))
  expect(front).toEqual(route)
  return front
}

const valid = (extra: Record<string, unknown> = {}) => JSON.stringify({ accountId: payer, asset: 'USDC', amount: '1.25', merchant: { name: 'Coffee', mcc: '5814' }, ...extra })

describe('the authorization answered in front of the app', () => {
  test('an approval and a decline', async () => {
    const approved = await bothWays({ key: fx.org.testKey, body: valid() })
    expect(approved.status).toBe(201)
    expect(approved.body).toMatchObject({ state: 'authorized', amount: '1.250000' })
    expect(approved.headers['content-type']).toBe('application/json;charset=utf-8')
    expect(approved.headers['x-request-id']).toBe('req_*')
    expect(approved.headers['x-ratelimit-limit']).toBe('1000000')
    const declined = await bothWays({ key: fx.org.testKey, body: valid({ amount: '1000' }) })
    expect(declined.body).toMatchObject({ state: 'declined', failureCode: 'insufficient_available' })
  })

  test('malformed input: the same error, field named', async () => {
    const cases: Array<[Sent, string]> = [
      [{ key: fx.org.testKey, body: JSON.stringify({ asset: 'USDC', amount: '1' }) }, 'accountId'],
      [{ key: fx.org.testKey, body: valid({ tip: '1' }) }, 'tip'],
      [{ key: fx.org.testKey, body: valid({ merchant: { name: 'Coffee', mcc: '58' } }) }, 'merchant.mcc'],
      [{ key: fx.org.testKey, body: valid({ amount: 12 }) }, 'amount'],
      [{ key: fx.org.testKey, body: valid({ amount: '1.1234567' }) }, 'amount'],
      [{ key: fx.org.testKey, body: '{"accountId":' }, 'body'],
      [{ key: fx.org.testKey, body: '' }, 'accountId'],
      [{ key: fx.org.testKey, body: '[]' }, 'body'],
      [{ key: fx.org.testKey, body: valid(), headers: { 'content-type': 'text/plain' } }, 'content-type'],
      [{ key: fx.org.testKey, body: valid(), headers: { 'idempotency-key': 'bad\u0001key' } }, 'Idempotency-Key'],
    ]
    for (const [sent, field] of cases) {
      const answer = await bothWays(sent)
      expect(answer.status).toBe(400)
      expect(answer.body).toMatchObject({ error: { code: 'invalid_request', field } })
    }
    const unknown = await bothWays({ key: fx.org.testKey, body: JSON.stringify({ accountId: 'acct_0000', asset: 'USDC', amount: '1' }) })
    expect(unknown).toMatchObject({ status: 404, body: { error: { code: 'not_found', field: 'accountId' } } })
  })

  test('a body that fails while it is read is refused as unreadable JSON, not as a server error', async () => {
    const failing = (): Request => {
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          controller.error(new Error('connection reset'))
        },
      })
      const headers = { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json', 'content-length': '40' }
      return new Request('http://kassa.test/v1/payments/authorize', { method: 'POST', headers, body })
    }
    const front = await shape(await app.kassa.handle(failing()))
    const route = await shape(await app.kassa.app.handle(failing()))
    expect(front).toEqual(route)
    expect(front).toMatchObject({ status: 400, body: { error: { code: 'invalid_request', field: 'body' } } })
  })

  test('a body over the limit is 413', async () => {
    const answer = await bothWays({ key: fx.org.testKey, body: valid({ description: 'x'.repeat(app.config.bodyLimitBytes) }) })
    expect(answer).toMatchObject({ status: 413, body: { error: { code: 'invalid_request', field: 'body' } } })
  })

  test('callers without a secret key are refused as on every route', async () => {
    expect((await bothWays({ body: valid() })).status).toBe(401)
    expect((await bothWays({ key: 'sk_test_not_a_key', body: valid() })).status).toBe(401)
    expect((await bothWays({ headers: { authorization: 'Basic abc' }, body: valid() })).status).toBe(401)
    expect((await bothWays({ key: fx.org.publishableKey, body: valid() })).body).toMatchObject({ error: { code: 'permission_denied' } })
  })

  test('an Idempotency-Key replays through either', async () => {
    const headers = { 'idempotency-key': `front-${crypto.randomUUID()}` }
    const first = await app.kassa.handle(request({ key: fx.org.testKey, headers, body: valid() }))
    expect(first.status).toBe(201)
    const paymentId = ((await first.json()) as { id: string }).id
    const front = await app.kassa.handle(request({ key: fx.org.testKey, headers, body: valid() }))
    const route = await app.kassa.app.handle(request({ key: fx.org.testKey, headers, body: valid() }))
    for (const replay of [front, route]) {
      expect(replay.headers.get('idempotent-replayed')).toBe('true')
      expect(((await replay.json()) as { id: string }).id).toBe(paymentId)
    }
    const conflict = await bothWays({ key: fx.org.testKey, headers, body: valid({ amount: '2' }) })
    expect(conflict).toMatchObject({ status: 409, body: { error: { code: 'idempotency_conflict' } } })
  })

  test('each authorization is counted once against the rate limit, and past it refused the same way', async () => {
    const org = await app.createOrg('Front Rate Org')
    expect((await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 4 })).status).toBe(200)
    const sent = { key: org.testKey, body: JSON.stringify({ accountId: payer, asset: 'USDC', amount: '1' }) }
    const remaining: string[] = []
    // Every count in one window: a run crossing a minute boundary would start a new one halfway.
    pinnedWallMs = Date.now()
    try {
      for (const through of ['front', 'route', 'front', 'route'] as const) {
        const answer = through === 'front' ? await app.kassa.handle(request(sent)) : await app.kassa.app.handle(request(sent))
        // Another organization's account: not found, counted all the same.
        expect(answer.status).toBe(404)
        remaining.push(answer.headers.get('x-ratelimit-remaining')!)
      }
      expect(remaining).toEqual(['3', '2', '1', '0'])
      const refused = await bothWays(sent)
      expect(refused).toMatchObject({ status: 429, body: { error: { code: 'rate_limited' } } })
      expect(refused.headers['retry-after']).toBeDefined()
    } finally {
      pinnedWallMs = undefined
    }
  })
})
