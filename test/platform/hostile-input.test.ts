import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { BUN_BODY_BACKSTOP_BYTES } from '../../server/platform/body.ts'
import { AUTHORIZATION_BUDGET_MS } from '../../server/modules/payments/state.ts'
import { MAX_BODY_DEPTH, scanJsonText } from '../../server/platform/input.ts'
import { startTestApp, type TestApp, type TestResponse } from '../support/app.ts'
import { expectVerified, ledgerFixture, ledgerRowCounts, type LedgerFixture } from '../ledger/support.ts'

let app: TestApp
let fx: LedgerFixture
let alice: string
let bob: string

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app, 'Hostile Input Org')
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  await fx.fund(alice, '1000')
}, 60_000)
afterAll(async () => {
  await app.close()
}, 60_000)

/** A request with the org's key and a body sent as the exact text given. */
function raw(method: string, path: string, text: string, headers: Record<string, string> = {}): Promise<TestResponse> {
  return app.call(method, path, { key: fx.org.testKey, rawBody: text, headers: { 'content-type': 'application/json', ...headers } })
}

function expectRefused(response: TestResponse, status: number, code: string, field?: string): void {
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({ status, code })
  if (field !== undefined) expect(response.body.error.field).toBe(field)
  expect(response.body.error.requestId).toMatch(/^req_/)
}

const transfer = (extra: string) => `{"sourceAccountId":"${alice}","destinationAccountId":"${bob}","asset":"USDC","amount":"1"${extra}}`

describe('text Postgres cannot store is refused at the edge, naming the field', () => {
  test('a NUL or a lone surrogate in a body field is 400 invalid_request naming it, on every kind of route, and nothing is written', async () => {
    const before = await ledgerRowCounts(app)
    const cases: Array<{ send: () => Promise<TestResponse>; field: string }> = [
      { send: () => raw('POST', '/v1/transfers', transfer(',"description":"a\\u0000b"')), field: 'description' },
      { send: () => raw('POST', '/v1/transfers', transfer(',"description":"a\\ud800b"')), field: 'description' },
      { send: () => raw('POST', '/v1/transfers', transfer(',"description":"a\\uDFFF"')), field: 'description' },
      { send: () => raw('POST', '/v1/accounts', '{"externalId":"x","metadata":{"note":"\\u0000"}}'), field: 'metadata.note' },
      { send: () => raw('POST', '/v1/payments/authorize', `{"accountId":"${alice}","asset":"USDC","amount":"1","description":"a\\u0000b"}`), field: 'description' },
      { send: () => raw('POST', '/v1/webhooks', '{"url":"https://example.com/\\u0000","events":["*"]}'), field: 'url' },
      { send: () => app.call('POST', '/ops/v1/orgs', { rawBody: '{"name":"a\\ud83d"}', headers: { 'content-type': 'application/json', authorization: `Bearer ${app.config.operatorToken}` } }), field: 'name' },
    ]
    for (const { send, field } of cases) expectRefused(await send(), 400, 'invalid_request', field)
    expect(await ledgerRowCounts(app)).toEqual(before)
  })

  test('a well-formed surrogate pair and other escapes are accepted as they are', async () => {
    const response = await raw('POST', '/v1/transfers', transfer(',"description":"\\ud83d\\ude00 caf\\u00e9"'))
    expect(response.status).toBe(201)
    expect(response.body.description).toBe('\u{1F600} caf\u00e9')
  })

  test('a body that is not UTF-8 is 400 naming the body', async () => {
    const bytes = new Uint8Array([...new TextEncoder().encode(transfer(',"description":"').slice(0, -1)), 0x22, 0xff, 0xfe, 0x22, 0x7d])
    const response = await app.kassa.handle(
      new Request('http://kassa.test/v1/transfers', { method: 'POST', headers: { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json' }, body: bytes }),
    )
    const body = (await response.json()) as TestResponse['body']
    expectRefused({ status: response.status, headers: response.headers, body }, 400, 'invalid_request', 'body')
    expect(body.error.message).toContain('UTF-8')
  })

  test('a path id with %00, a lone surrogate or bytes that are not UTF-8 names nothing: 404, never 500', async () => {
    for (const id of ['tr_%00', 'tr_%ff', 'tr_%ED%A0%80', '%00']) {
      expectRefused(await app.call('GET', `/v1/transfers/${id}`, { key: fx.org.testKey }), 404, 'not_found')
      expectRefused(await app.call('POST', `/v1/holds/${id}/release`, { key: fx.org.testKey, body: {} }), 404, 'not_found')
      expectRefused(await app.call('PATCH', `/ops/v1/orgs/${id}/limits`, { body: { rateLimitPerMinute: 5 }, headers: { authorization: `Bearer ${app.config.operatorToken}` } }), 404, 'not_found')
    }
  })

  test('a query parameter holding a NUL is 400 naming it', async () => {
    expectRefused(await app.call('GET', '/v1/transfers?after=tr_%00', { key: fx.org.testKey }), 400, 'invalid_request', 'after')
  })

  test("one organization's unstorable authorizations do not make another's decline", async () => {
    // Declines here can only come from failed commits: the budget is long enough for a busy machine.
    app.kassa.payments.configure({ budgetMs: 10_000 })
    const victim = await ledgerFixture(app, 'Victim Org')
    const payer = await victim.mint('payer')
    await victim.fund(payer, '1000')
    const attacker = fx.org.testKey
    // Each round one of each, sent together, so that they meet in the writer's batches (as they
    // did when the attacker's row failed its batch and the victim's authorization with it).
    for (let round = 0; round < 40; round++) {
      const [victimAnswer, attackerAnswer] = await Promise.all([
        app.call('POST', '/v1/payments/authorize', { key: victim.org.testKey, body: { accountId: payer, asset: 'USDC', amount: '1', description: `v${round}` } }),
        app.call('POST', '/v1/payments/authorize', { key: attacker, body: { accountId: alice, asset: 'USDC', amount: '1', description: `x\u0000${round}` } }),
      ])
      expect({ status: victimAnswer.status, state: victimAnswer.body.state, failureCode: victimAnswer.body.failureCode }).toEqual({ status: 201, state: 'authorized', failureCode: null })
      expectRefused(attackerAnswer, 400, 'invalid_request', 'description')
    }
    app.kassa.payments.configure({ budgetMs: AUTHORIZATION_BUDGET_MS })
    await expectVerified(app)
  })
})

describe('bodies are bounded before they are parsed', () => {
  test('the depth scan counts brackets outside strings only, and refuses past the limit', () => {
    expect(() => scanJsonText('['.repeat(MAX_BODY_DEPTH) + ']'.repeat(MAX_BODY_DEPTH))).not.toThrow()
    expect(() => scanJsonText('['.repeat(MAX_BODY_DEPTH + 1) + ']'.repeat(MAX_BODY_DEPTH + 1))).toThrow(`nested deeper than ${MAX_BODY_DEPTH}`)
    expect(() => scanJsonText(`{"a":"${'['.repeat(1000)}\\"${'{'.repeat(1000)}"}`)).not.toThrow()
    expect(scanJsonText('{"a":"\\\\u0000"}').unicodeEscape).toBe(false)
    expect(scanJsonText('{"a":"\\u0000"}').unicodeEscape).toBe(true)
  })

  test('50,000 nested arrays or 20,000 nested objects are 400 naming the body, answered at once', async () => {
    const hostile = ['['.repeat(50_000) + ']'.repeat(50_000), '{"a":'.repeat(20_000) + '1' + '}'.repeat(20_000)]
    for (const path of ['/v1/transfers', '/v1/payments/authorize', '/v1/accounts']) {
      for (const text of hostile) {
        const started = performance.now()
        const response = await raw('POST', path, text)
        const elapsedMs = performance.now() - started
        expectRefused(response, 400, 'invalid_request', 'body')
        expect(response.body.error.message).toContain('nested deeper')
        // The one timing check the issue allows: a hostile body costs a scan, not a stall.
        expect(elapsedMs).toBeLessThan(100)
      }
    }
  })
})

describe('prototype keys and Idempotency-Key are refused alike on every route', () => {
  test('__proto__, constructor and prototype keys are 400 naming the key, on the routes that took them and on others', async () => {
    const ops = { authorization: `Bearer ${app.config.operatorToken}`, 'content-type': 'application/json' }
    const cases: Array<{ send: (key: string) => Promise<TestResponse>; field: (key: string) => string }> = [
      { send: (key) => raw('POST', '/v1/holds', `{"accountId":"${alice}","asset":"USDC","amount":"1","expiresInSeconds":600,"${key}":{"x":1}}`), field: (key) => key },
      { send: (key) => raw('POST', '/v1/sandbox/clock/advance', `{"seconds":1,"${key}":{"x":1}}`), field: (key) => key },
      { send: (key) => app.call('PATCH', `/ops/v1/orgs/${fx.org.id}/limits`, { rawBody: `{"rateLimitPerMinute":1000000,"${key}":{"x":1}}`, headers: ops }), field: (key) => key },
      { send: (key) => app.call('POST', `/ops/v1/keys/${fx.org.testKeyId}/rotate`, { rawBody: `{"${key}":{"x":1}}`, headers: ops }), field: (key) => key },
      { send: (key) => raw('POST', '/v1/accounts', `{"externalId":"p","metadata":{"${key}":"x"}}`), field: (key) => `metadata.${key}` },
      { send: (key) => raw('POST', '/v1/payments/authorize', `{"accountId":"${alice}","asset":"USDC","amount":"1","${key}":{}}`), field: (key) => key },
    ]
    const before = await ledgerRowCounts(app)
    for (const key of ['__proto__', 'constructor', 'prototype']) {
      for (const { send, field } of cases) expectRefused(await send(key), 400, 'invalid_request', field(key))
    }
    // Spelled with escapes, the key is the same key.
    expectRefused(await raw('POST', '/v1/sandbox/clock/advance', '{"seconds":1,"\\u005f_proto__":{}}'), 400, 'invalid_request', '__proto__')
    expect(await ledgerRowCounts(app)).toEqual(before)
  })

  test('an Idempotency-Key that is empty, longer than 255 or not visible ASCII is 400 naming the header, on every route', async () => {
    const ops = { authorization: `Bearer ${app.config.operatorToken}` }
    const routes: Array<(headers: Record<string, string>) => Promise<TestResponse>> = [
      (headers) => raw('POST', '/v1/transfers', transfer(''), headers),
      (headers) => raw('POST', '/v1/payments/authorize', `{"accountId":"${alice}","asset":"USDC","amount":"1"}`, headers),
      (headers) => raw('POST', '/v1/sandbox/clock/advance', '{"seconds":1}', headers),
      (headers) => app.call('POST', '/ops/v1/orgs', { body: { name: 'keyed' }, headers: { ...ops, ...headers } }),
      (headers) => app.call('POST', `/ops/v1/keys/${fx.org.publishableKeyId}/rotate`, { body: {}, headers: { ...ops, ...headers } }),
      (headers) => app.call('PATCH', `/ops/v1/orgs/${fx.org.id}/limits`, { body: { rateLimitPerMinute: 1_000_000 }, headers: { ...ops, ...headers } }),
    ]
    const orgsBefore = (await app.ops('GET', '/ops/v1/orgs?limit=100')).body
    const before = await ledgerRowCounts(app)
    // Header values travel as Latin-1: 'é' arrives as one byte outside ASCII.
    for (const key of ['', 'x'.repeat(256), 'x'.repeat(10_000), 'has space', 'caf\u00e9', 'tab\there']) {
      const headers = { 'idempotency-key': key }
      for (const send of routes) expectRefused(await send(headers), 400, 'invalid_request', 'Idempotency-Key')
    }
    expect(await ledgerRowCounts(app)).toEqual(before)
    expect((await app.ops('GET', '/ops/v1/orgs?limit=100')).body).toEqual(orgsBefore)
    // 255 visible characters are a key.
    expect((await raw('POST', '/v1/transfers', transfer(''), { 'idempotency-key': '~'.repeat(255) })).status).toBe(201)
  })
})

describe('operator authentication', () => {
  test('failed operator authentications are limited per source: past the limit 429 with Retry-After, for the right token too', async () => {
    const guess = (token: string) => app.call('GET', '/ops/v1/orgs', { headers: { authorization: `Bearer ${token}` } })
    const statuses: number[] = []
    for (let attempt = 0; attempt < 40; attempt++) statuses.push((await guess(`wrong-${attempt}`)).status)
    expect(statuses.slice(0, 30).every((status) => status === 401)).toBe(true)
    expect(statuses.slice(30).every((status) => status === 429)).toBe(true)
    const refused = await guess('still-wrong')
    expectRefused(refused, 429, 'rate_limited')
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1)
    expectRefused(await guess(app.config.operatorToken!), 429, 'rate_limited')
  })
})

describe('over a real socket', () => {
  test('a body over the limit is 413 with the error body; hostile bodies do not hold up /health', async () => {
    const listening = app.kassa.app.listen({ port: 0, hostname: '127.0.0.1', maxRequestBodySize: BUN_BODY_BACKSTOP_BYTES })
    try {
      const base = `http://127.0.0.1:${listening.server!.port}`
      const headers = { authorization: `Bearer ${fx.org.testKey}`, 'content-type': 'application/json' }
      for (const size of [300 * 1024, 3 * 1024 * 1024]) {
        const response = await fetch(`${base}/v1/accounts`, { method: 'POST', headers, body: JSON.stringify({ externalId: 'big', metadata: { note: 'x'.repeat(size) } }) })
        expect(response.status).toBe(413)
        expect(await response.json()).toMatchObject({ error: { code: 'invalid_request', field: 'body' } })
      }
      const deep = '['.repeat(50_000) + ']'.repeat(50_000)
      const hostile = Array.from({ length: 20 }, (_, index) => fetch(`${base}${index % 2 === 0 ? '/v1/transfers' : '/v1/payments/authorize'}`, { method: 'POST', headers, body: deep }).then((response) => response.status))
      expect((await fetch(`${base}/health`)).status).toBe(200)
      expect(new Set(await Promise.all(hostile))).toEqual(new Set([400]))
    } finally {
      await app.kassa.app.stop()
    }
  })
})
