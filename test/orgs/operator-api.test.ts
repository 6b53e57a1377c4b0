import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { ONBOARDING_ITEMS } from '../../server/modules/orgs/model.ts'
import { startTestApp, type TestApp, type TestResponse } from '../support/app.ts'

let app: TestApp

beforeAll(async () => {
  app = await startTestApp()
})
afterAll(async () => {
  await app.close()
})

async function organizationCount(): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from organizations`)
  return row!.count
}

async function keyCount(orgId: string): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from api_keys where org_id = ${orgId}`)
  return row!.count
}

function expectError(response: TestResponse, status: number, code: string): void {
  expect(response.status).toBe(status)
  expect(response.body.error.code).toBe(code)
  expect(typeof response.body.error.message).toBe('string')
  expect(response.body.error.requestId).toBe(response.headers.get('x-request-id')!)
}

async function completeChecklistAndSignOff(orgId: string): Promise<void> {
  const items = Object.fromEntries(ONBOARDING_ITEMS.map((item) => [item, true]))
  expect((await app.ops('PATCH', `/ops/v1/orgs/${orgId}/onboarding`, { items })).status).toBe(200)
  expect((await app.ops('POST', `/ops/v1/orgs/${orgId}/onboarding/sign-off`, { signedOffBy: 'ops@kassa.test' })).status).toBe(200)
}

describe('operator token', () => {
  test('refuses the operator API without a token, with the one error body, and creates nothing', async () => {
    const before = await organizationCount()
    const response = await app.call('POST', '/ops/v1/orgs', { body: { name: 'Sneaky' } })
    expectError(response, 401, 'authentication_error')
    expect(Object.keys(response.body)).toEqual(['error'])
    expect(await organizationCount()).toBe(before)
  })

  test('refuses a wrong operator token and an API key in its place', async () => {
    const org = await app.createOrg('Key holder')
    const before = await organizationCount()
    for (const authorization of [`Bearer ${app.config.operatorToken}x`, `Bearer ${org.testKey}`, `Basic ${app.config.operatorToken}`, 'Bearer']) {
      const response = await app.call('POST', '/ops/v1/orgs', { body: { name: 'Sneaky' }, headers: { authorization } })
      expectError(response, 401, 'authentication_error')
    }
    expectError(await app.call('GET', '/ops/v1/orgs', { headers: { 'x-api-key': app.config.operatorToken! } }), 401, 'authentication_error')
    expect(await organizationCount()).toBe(before)
  })

  test('refuses the operator token as an API key on /v1', async () => {
    const response = await app.call('GET', '/v1/accounts', { key: app.config.operatorToken })
    expectError(response, 401, 'authentication_error')
  })
})

describe('onboarding an organization', () => {
  test('answers 201 with the org id, its name and a sandbox test key and publishable key', async () => {
    const response = await app.ops('POST', '/ops/v1/orgs', { name: 'Acme Payments' })
    expect(response.status).toBe(201)
    expect(response.body.id).toMatch(/^org_[0-9a-f]{32}$/)
    expect(response.body.name).toBe('Acme Payments')
    const keys = response.body.keys as Array<Record<string, string>>
    expect(keys).toHaveLength(2)
    const test = keys.find((key) => key.type === 'test')!
    const publishable = keys.find((key) => key.type === 'publishable')!
    expect(test).toMatchObject({ type: 'test', environment: 'sandbox' })
    expect(test.key).toMatch(/^svc_test_[1-9A-HJ-NP-Za-km-z]{20,64}$/)
    expect(test.id).toMatch(/^key_[0-9a-f]{32}$/)
    expect(publishable).toMatchObject({ type: 'publishable', environment: 'sandbox' })
    expect(publishable.key).toMatch(/^svc_pub_[1-9A-HJ-NP-Za-km-z]{20,64}$/)
    expect(test.key).not.toBe(publishable.key)
    // Both keys work at once.
    expect((await app.call('GET', '/v1/accounts', { key: test.key })).status).toBe(200)
    expect((await app.call('GET', '/v1/assets', { key: publishable.key })).status).toBe(200)
  })

  test('refuses a missing, empty or unknown field in the create body and creates nothing', async () => {
    const before = await organizationCount()
    for (const [body, field] of [
      [{}, 'name'],
      [{ name: '' }, 'name'],
      [{ name: 42 }, 'name'],
      [{ name: 'Ok', plan: 'gold' }, 'plan'],
    ] as const) {
      const response = await app.ops('POST', '/ops/v1/orgs', body)
      expectError(response, 400, 'invalid_request')
      expect(response.body.error.field).toBe(field)
    }
    expect(await organizationCount()).toBe(before)
  })

  test('reads an organization with its keys but never their secrets or hashes', async () => {
    const created = await app.ops('POST', '/ops/v1/orgs', { name: 'Secretive' })
    const response = await app.ops('GET', `/ops/v1/orgs/${created.body.id}`)
    expect(response.status).toBe(200)
    expect(response.body).toMatchObject({ id: created.body.id, name: 'Secretive', rateLimitPerMinute: 1000 })
    expect(response.body.onboarding.signedOffAt).toBeNull()
    expect(response.body.keys).toHaveLength(2)
    const text = JSON.stringify(response.body)
    const [hashRow] = await queryRows<{ key_hash: string }>(app.kassa.runtime.db, sql`select key_hash from api_keys where org_id = ${created.body.id} limit 1`)
    for (const issued of created.body.keys as Array<{ key: string; id: string }>) {
      expect(text).not.toContain(issued.key)
      const summary = (response.body.keys as Array<Record<string, unknown>>).find((key) => key.id === issued.id)!
      expect(summary).not.toHaveProperty('key')
      expect(summary.lastFour).toBe(issued.key.slice(-4))
      expect(summary.status).toBe('active')
    }
    expect(text).not.toContain(hashRow!.key_hash)
    const list = await app.ops('GET', '/ops/v1/orgs')
    expect(list.status).toBe(200)
    expect((list.body.orgs as Array<{ id: string }>).map((org) => org.id)).toContain(created.body.id)
    const listText = JSON.stringify(list.body)
    for (const issued of created.body.keys as Array<{ key: string }>) expect(listText).not.toContain(issued.key)
  })

  test('lists organizations a page at a time, in creation order, each with its keys and never their secrets', async () => {
    const created: Array<{ id: string; keys: Array<{ key: string }> }> = []
    for (let index = 0; index < 5; index++) created.push((await app.ops('POST', '/ops/v1/orgs', { name: `Paged ${index}` })).body)
    const everyId = (await queryRows<{ id: string }>(app.kassa.runtime.db, sql`select id from organizations order by id`)).map((row) => row.id)
    const seen: string[] = []
    let after: string | undefined
    for (;;) {
      const page = await app.ops('GET', `/ops/v1/orgs?limit=2${after === undefined ? '' : `&after=${after}`}`)
      expect(page.status).toBe(200)
      const orgs = page.body.orgs as Array<{ id: string; keys: Array<Record<string, unknown>> }>
      expect(orgs.length).toBeLessThanOrEqual(2)
      for (const org of orgs) expect(org.keys.map((key) => key.id)).toEqual((await app.ops('GET', `/ops/v1/orgs/${org.id}`)).body.keys.map((key: { id: string }) => key.id))
      seen.push(...orgs.map((org) => org.id))
      if (!page.body.hasMore) break
      after = orgs.at(-1)!.id
    }
    expect(seen).toEqual(everyId)
    const text = JSON.stringify((await app.ops('GET', `/ops/v1/orgs?limit=200`)).body)
    for (const org of created) {
      expect(seen).toContain(org.id)
      for (const issued of org.keys) expect(text).not.toContain(issued.key)
    }
    // Left out, the page is 50; past the last organization, an empty page.
    const first = await app.ops('GET', '/ops/v1/orgs')
    expect(first.body.orgs.map((org: { id: string }) => org.id)).toEqual(everyId.slice(0, 50))
    expect(first.body.hasMore).toBe(everyId.length > 50)
    expect((await app.ops('GET', `/ops/v1/orgs?after=${everyId.at(-1)}`)).body).toEqual({ orgs: [], hasMore: false })
  })

  test('refuses a page size out of range or an overlong cursor, naming the field', async () => {
    for (const [query, field] of [
      ['limit=0', 'limit'],
      ['limit=201', 'limit'],
      ['limit=-1', 'limit'],
      ['limit=1.5', 'limit'],
      ['limit=many', 'limit'],
      [`after=${'o'.repeat(65)}`, 'after'],
    ] as const) {
      const response = await app.ops('GET', `/ops/v1/orgs?${query}`)
      expect(response.status).toBe(400)
      expect(response.body.error).toMatchObject({ code: 'invalid_request', field })
    }
  })

  test('answers 404 for an organization that does not exist', async () => {
    expectError(await app.ops('GET', '/ops/v1/orgs/org_00000000000000000000000000000000'), 404, 'not_found')
    expectError(await app.ops('POST', '/ops/v1/orgs/org_00000000000000000000000000000000/keys', { type: 'test', environment: 'sandbox' }), 404, 'not_found')
  })
})

describe('production keys', () => {
  test('refuses production keys before sign-off with 409 conflict and issues none', async () => {
    const org = await app.createOrg('Not yet')
    const before = await keyCount(org.id)
    for (const type of ['secret', 'publishable']) {
      const response = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type, environment: 'production' })
      expectError(response, 409, 'conflict')
    }
    expect(await keyCount(org.id)).toBe(before)
  })

  test('refuses sign-off while checklist items are open, naming the first open item', async () => {
    const org = await app.createOrg('Half done')
    await app.ops('PATCH', `/ops/v1/orgs/${org.id}/onboarding`, { items: { business_verified: true } })
    const response = await app.ops('POST', `/ops/v1/orgs/${org.id}/onboarding/sign-off`, { signedOffBy: 'ops@kassa.test' })
    expectError(response, 409, 'conflict')
    expect(response.body.error.field).toBe('checklist.agreement_signed')
    const org2 = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    expect(org2.body.onboarding.signedOffAt).toBeNull()
    expect(org2.body.onboarding.checklist.business_verified).toBe(true)
    expectError(await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'production' }), 409, 'conflict')
  })

  test('refuses an unknown checklist item', async () => {
    const org = await app.createOrg('Typo')
    const response = await app.ops('PATCH', `/ops/v1/orgs/${org.id}/onboarding`, { items: { busines_verified: true } })
    expectError(response, 400, 'invalid_request')
    expect(response.body.error.field).toBe('items.busines_verified')
  })

  test('issues production secret and publishable keys once the checklist is completed and signed off', async () => {
    const org = await app.createOrg('Ready')
    await completeChecklistAndSignOff(org.id)
    const described = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    expect(described.body.onboarding.signedOffBy).toBe('ops@kassa.test')
    expect(described.body.onboarding.signedOffAt).not.toBeNull()
    const secret = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'production' })
    expect(secret.status).toBe(201)
    expect(secret.body).toMatchObject({ type: 'secret', environment: 'production' })
    expect(secret.body.key).toMatch(/^svc_secret_/)
    const publishable = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'publishable', environment: 'production' })
    expect(publishable.status).toBe(201)
    expect(publishable.body.key).toMatch(/^svc_pub_/)
    // Signing off twice, or changing the checklist afterwards, is a conflict.
    expectError(await app.ops('POST', `/ops/v1/orgs/${org.id}/onboarding/sign-off`, { signedOffBy: 'someone else' }), 409, 'conflict')
    expectError(await app.ops('PATCH', `/ops/v1/orgs/${org.id}/onboarding`, { items: { security_review: false } }), 409, 'conflict')
    const after = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    expect(after.body.onboarding.signedOffBy).toBe('ops@kassa.test')
    expect(after.body.onboarding.checklist.security_review).toBe(true)
  })

  test('refuses test keys in production and secret keys in sandbox, even after sign-off', async () => {
    const org = await app.createOrg('Strict')
    await completeChecklistAndSignOff(org.id)
    const before = await keyCount(org.id)
    const testInProduction = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'test', environment: 'production' })
    expectError(testInProduction, 400, 'invalid_request')
    expect(testInProduction.body.error.field).toBe('environment')
    const secretInSandbox = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'sandbox' })
    expectError(secretInSandbox, 400, 'invalid_request')
    expect(secretInSandbox.body.error.field).toBe('type')
    const unknownType = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'master', environment: 'sandbox' })
    expectError(unknownType, 400, 'invalid_request')
    expect(unknownType.body.error.field).toBe('type')
    expect(await keyCount(org.id)).toBe(before)
  })
})

describe('rate limit raise', () => {
  test('raises an organization limit, shows it in the rate headers, and restores the default with null', async () => {
    const org = await app.createOrg('Benchmarker')
    const raised = await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 50_000 })
    expect(raised.status).toBe(200)
    expect(raised.body.rateLimitPerMinute).toBe(50_000)
    const call = await app.call('GET', '/v1/accounts', { key: org.testKey })
    expect(call.headers.get('x-ratelimit-limit')).toBe('50000')
    // Publishable keys keep the contract's own limit.
    expect((await app.call('GET', '/v1/assets', { key: org.publishableKey })).headers.get('x-ratelimit-limit')).toBe('100')
    const restored = await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: null })
    expect(restored.body.rateLimitPerMinute).toBe(1000)
    expect((await app.call('GET', '/v1/accounts', { key: org.testKey })).headers.get('x-ratelimit-limit')).toBe('1000')
    expectError(await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 0 }), 400, 'invalid_request')
  })
})
