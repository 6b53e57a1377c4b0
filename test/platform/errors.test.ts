import { afterAll, beforeAll, describe, expect, spyOn, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { ERROR_STATUS } from '../../server/lib/errors.ts'
import { startTestApp, type TestApp, type TestOrg, type TestResponse } from '../support/app.ts'

const BODY_LIMIT_BYTES = 2048

let app: TestApp
let org: TestOrg

beforeAll(async () => {
  app = await startTestApp({ bodyLimitBytes: BODY_LIMIT_BYTES })
  org = await app.createOrg('Errors')
})
afterAll(async () => {
  await app.close()
})

async function accountCount(): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from accounts where org_id = ${org.id}`)
  return row!.count
}

/** The one error body: exactly `{ error: { code, message, field?, requestId } }`, with the id also as a header. */
function expectErrorBody(response: TestResponse, status: number, code: string, field?: string): void {
  expect(response.status).toBe(status)
  expect(response.headers.get('content-type')).toContain('application/json')
  expect(Object.keys(response.body)).toEqual(['error'])
  const error = response.body.error as Record<string, unknown>
  const allowed = ['code', 'message', 'field', 'requestId']
  for (const key of Object.keys(error)) expect(allowed).toContain(key)
  expect(error.code).toBe(code)
  expect(ERROR_STATUS[code as keyof typeof ERROR_STATUS] === status || status === 413).toBe(true)
  expect(typeof error.message).toBe('string')
  expect((error.message as string).length).toBeGreaterThan(0)
  expect(error.requestId).toMatch(/^req_[0-9a-f]{32}$/)
  expect(response.headers.get('x-request-id')).toBe(error.requestId as string)
  if (field === undefined) expect(error).not.toHaveProperty('field')
  else expect(error.field).toBe(field)
}

async function mint(body: unknown): Promise<TestResponse> {
  return app.call('POST', '/v1/accounts', { key: org.testKey, body })
}

describe('the one error body', () => {
  test('every kind of failure answers the same shape with the request id in body and header', async () => {
    const org2 = await app.createOrg('Other')
    expectErrorBody(await app.call('GET', '/v1/accounts'), 401, 'authentication_error')
    expectErrorBody(await app.call('GET', '/v1/accounts', { key: org2.publishableKey }), 403, 'permission_denied')
    expectErrorBody(await app.call('GET', '/v1/accounts/acct_00000000000000000000000000000000', { key: org.testKey }), 404, 'not_found')
    expectErrorBody(await mint({ externalId: 'bad id!' }), 400, 'invalid_request', 'externalId')
    expectErrorBody(await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'production' }), 409, 'conflict', 'environment')
    expectErrorBody(await app.call('GET', '/ops/v1/orgs'), 401, 'authentication_error')
  })

  test('successful answers carry a request id too, a fresh one for every request', async () => {
    const first = await app.call('GET', '/v1/assets')
    const second = await app.call('GET', '/v1/accounts', { key: org.testKey })
    const third = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    const ids = [first, second, third].map((response) => response.headers.get('x-request-id'))
    for (const id of ids) expect(id).toMatch(/^req_[0-9a-f]{32}$/)
    expect(new Set(ids).size).toBe(3)
  })
})

describe('validation', () => {
  test.each([
    ['a wrong type', { externalId: 42 }, 'externalId'],
    ['a missing field', {}, 'externalId'],
    ['an unknown field', { externalId: 'valid-1', nickname: 'x' }, 'nickname'],
    ['a value outside the choices', { externalId: 'valid-2', type: 'robot' }, 'type'],
    ['a nested wrong type', { externalId: 'valid-3', metadata: { tier: 5 } }, 'metadata.tier'],
    ['a pattern mismatch', { externalId: 'has spaces' }, 'externalId'],
  ])('refuses %s as 400 invalid_request naming the field, and creates nothing', async (_name, body, field) => {
    const before = await accountCount()
    const response = await mint(body)
    expectErrorBody(response, 400, 'invalid_request', field)
    expect(await accountCount()).toBe(before)
  })

  test('says which field is unknown and which choices exist', async () => {
    expect((await mint({ externalId: 'valid-4', nickname: 'x' })).body.error.message).toContain('nickname')
    expect((await mint({ externalId: 'valid-5', type: 'robot' })).body.error.message).toContain('individual')
  })

  test('refuses bad and unknown query parameters, naming them', async () => {
    expectErrorBody(await app.call('GET', '/v1/accounts?limit=abc', { key: org.testKey }), 400, 'invalid_request', 'limit')
    expectErrorBody(await app.call('GET', '/v1/accounts?limit=100000', { key: org.testKey }), 400, 'invalid_request', 'limit')
    expectErrorBody(await app.call('GET', '/v1/accounts?colour=red', { key: org.testKey }), 400, 'invalid_request', 'colour')
  })

  test('refuses malformed JSON as invalid_request on the field body, and creates nothing', async () => {
    const before = await accountCount()
    for (const rawBody of ['{"externalId":', '{externalId: "x"}', 'null x']) {
      const response = await app.call('POST', '/v1/accounts', { key: org.testKey, rawBody, headers: { 'content-type': 'application/json' } })
      expectErrorBody(response, 400, 'invalid_request', 'body')
    }
    expect(await accountCount()).toBe(before)
  })

  test('refuses a body that is not declared as JSON', async () => {
    const before = await accountCount()
    const response = await app.call('POST', '/v1/accounts', {
      key: org.testKey,
      rawBody: '{"externalId":"plain-text"}',
      headers: { 'content-type': 'text/plain' },
    })
    expectErrorBody(response, 400, 'invalid_request', 'content-type')
    expect(await accountCount()).toBe(before)
  })
})

describe('body size limit', () => {
  const oversized = JSON.stringify({ externalId: 'too-big', metadata: { note: 'x'.repeat(BODY_LIMIT_BYTES) } })

  test('refuses a body over the limit with 413 invalid_request, and creates nothing', async () => {
    const before = await accountCount()
    const response = await app.call('POST', '/v1/accounts', {
      key: org.testKey,
      rawBody: oversized,
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(oversized)) },
    })
    expectErrorBody(response, 413, 'invalid_request', 'body')
    expect(response.body.error.message).toContain(String(BODY_LIMIT_BYTES))
    expect(await accountCount()).toBe(before)
  })

  test('counts a streamed body without Content-Length as it arrives', async () => {
    const before = await accountCount()
    const bytes = new TextEncoder().encode(oversized)
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let offset = 0; offset < bytes.length; offset += 512) controller.enqueue(bytes.slice(offset, offset + 512))
        controller.close()
      },
    })
    const request = new Request('http://kassa.test/v1/accounts', {
      method: 'POST',
      headers: { authorization: `Bearer ${org.testKey}`, 'content-type': 'application/json' },
      body: stream,
    })
    expect(request.headers.get('content-length')).toBeNull()
    const response = await app.kassa.app.handle(request)
    expectErrorBody({ status: response.status, headers: response.headers, body: await response.json() }, 413, 'invalid_request', 'body')
    expect(await accountCount()).toBe(before)
  })

  test('measures a body whose Content-Length says less than it carries', async () => {
    const before = await accountCount()
    const request = new Request('http://kassa.test/v1/accounts', {
      method: 'POST',
      headers: { authorization: `Bearer ${org.testKey}`, 'content-type': 'application/json', 'content-length': '64' },
      body: oversized,
    })
    expect(request.headers.get('content-length')).toBe('64')
    const response = await app.kassa.app.handle(request)
    expectErrorBody({ status: response.status, headers: response.headers, body: await response.json() }, 413, 'invalid_request', 'body')
    expect(await accountCount()).toBe(before)
  })

  test('accepts a body with its Content-Length, and reads it as UTF-8', async () => {
    const body = JSON.stringify({ externalId: 'declared-length', metadata: { note: 'caf\u00e9 \u20ac' } })
    const response = await app.call('POST', '/v1/accounts', {
      key: org.testKey,
      rawBody: body,
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
    })
    expect(response.status).toBe(201)
    expect(response.body.metadata).toEqual({ note: 'caf\u00e9 \u20ac' })
  })

  test('refuses a body that starts with a byte order mark as not JSON, with or without Content-Length', async () => {
    const body = `\ufeff${JSON.stringify({ externalId: 'with-bom' })}`
    const variants: Array<Record<string, string>> = [{ 'content-type': 'application/json' }, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }]
    for (const headers of variants) {
      const response = await app.call('POST', '/v1/accounts', { key: org.testKey, rawBody: body, headers })
      expectErrorBody(response, 400, 'invalid_request', 'body')
    }
  })

  test('accepts a body just under the limit', async () => {
    const body = JSON.stringify({ externalId: 'just-fits', metadata: { note: 'x'.repeat(400) } })
    expect(Buffer.byteLength(body)).toBeLessThan(BODY_LIMIT_BYTES)
    const response = await app.call('POST', '/v1/accounts', { key: org.testKey, rawBody: body, headers: { 'content-type': 'application/json' } })
    expect(response.status).toBe(201)
  })

  test('applies to the operator API as well', async () => {
    const response = await app.ops('POST', '/ops/v1/orgs', { name: 'y'.repeat(BODY_LIMIT_BYTES + 10) })
    expectErrorBody(response, 413, 'invalid_request', 'body')
  })
})

describe('unknown routes', () => {
  test('answer 404 not_found in the one error body', async () => {
    expectErrorBody(await app.call('GET', '/v1/no-such-thing', { key: org.testKey }), 404, 'not_found')
    expectErrorBody(await app.call('GET', '/v1/no-such-thing'), 404, 'not_found')
    expectErrorBody(await app.call('GET', '/nowhere'), 404, 'not_found')
    expectErrorBody(await app.ops('GET', '/ops/v1/nowhere'), 404, 'not_found')
    expectErrorBody(await app.call('DELETE', '/v1/assets', { key: org.testKey }), 404, 'not_found')
  })

  test('still authenticate first: a bad key on an unknown /v1 route is 401', async () => {
    expectErrorBody(await app.call('GET', '/v1/no-such-thing', { key: 'svc_test_nope' }), 401, 'authentication_error')
  })
})

describe('unexpected failures', () => {
  test('become 500 internal with a request id and never leak a stack trace or database detail', async () => {
    const silenced = spyOn(console, 'error').mockImplementation(() => {})
    // Hiding the table makes the real query fail the way a broken database would.
    await app.kassa.runtime.db.execute(sql`alter table accounts rename to accounts_hidden_for_test`)
    let response: TestResponse
    let logged: unknown[][]
    try {
      response = await mint({ externalId: 'during-outage' })
    } finally {
      await app.kassa.runtime.db.execute(sql`alter table accounts_hidden_for_test rename to accounts`)
      logged = [...silenced.mock.calls]
      silenced.mockRestore()
    }
    expectErrorBody(response, 500, 'internal')
    const text = JSON.stringify(response.body)
    for (const leak of ['accounts', 'relation', 'stack', '    at ', '.ts:', 'Error:']) expect(text).not.toContain(leak)
    // The server logged the cause under the same request id the client was given.
    expect(logged.length).toBeGreaterThan(0)
    expect(String(logged[0]?.[0])).toContain(response.body.error.requestId)
    expect((await mint({ externalId: 'after-outage' })).status).toBe(201)
  })
})
