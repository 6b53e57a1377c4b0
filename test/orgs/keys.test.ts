import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { createApp, type Kassa } from '../../server/app.ts'
import { configForTests } from '../support/config.ts'
import { ONBOARDING_ITEMS } from '../../server/modules/orgs/model.ts'
import { startTestApp, type TestApp, type TestOrg, type TestResponse } from '../support/app.ts'
import { eventually } from '../support/eventually.ts'

let app: TestApp
/**
 * How far the app's wall clock runs ahead of the real one: a rotation's overlap is lived through by
 * moving it on, not by waiting it out.
 */
let wallAheadMs = 0
/** A production server on the same database as the sandbox one: it sees every key, but honours only its own. */
let production: Kassa

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => Date.now() + wallAheadMs })
  production = await createApp(configForTests({ serviceEnv: 'production', databaseUrl: app.database.databaseUrl }), {
    database: await app.database.open(),
  })
})
afterAll(async () => {
  // The database handle belongs to the test database (shared on the embedded default), so only
  // the production app's background work is stopped here; the handle closes with the sandbox app.
  for (const stop of production.runtime.stoppers.splice(0)) await stop()
  await app.close()
})

async function callProduction(method: string, path: string, key: string): Promise<TestResponse> {
  const response = await production.app.handle(
    new Request(`http://kassa.test${path}`, { method, headers: { authorization: `Bearer ${key}` } }),
  )
  return { status: response.status, headers: response.headers, body: await response.json() }
}

async function accountCount(orgId: string): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from accounts where org_id = ${orgId}`)
  return row!.count
}

function expectAuthenticationError(response: TestResponse): void {
  expect(response.status).toBe(401)
  expect(response.body.error.code).toBe('authentication_error')
  expect(response.body.error.requestId).toBe(response.headers.get('x-request-id')!)
}

async function signedOffOrg(name: string): Promise<TestOrg> {
  const org = await app.createOrg(name)
  const items = Object.fromEntries(ONBOARDING_ITEMS.map((item) => [item, true]))
  await app.ops('PATCH', `/ops/v1/orgs/${org.id}/onboarding`, { items })
  await app.ops('POST', `/ops/v1/orgs/${org.id}/onboarding/sign-off`, { signedOffBy: 'ops@kassa.test' })
  return org
}

describe('presenting a key', () => {
  let org: TestOrg
  beforeAll(async () => {
    org = await app.createOrg('Presenter')
  })

  test('accepts a key as Authorization: Bearer and as x-api-key', async () => {
    const bearer = await app.call('GET', '/v1/accounts', { headers: { authorization: `Bearer ${org.testKey}` } })
    expect(bearer.status).toBe(200)
    const lowerCaseScheme = await app.call('GET', '/v1/accounts', { headers: { authorization: `bearer ${org.testKey}` } })
    expect(lowerCaseScheme.status).toBe(200)
    const header = await app.call('GET', '/v1/accounts', { headers: { 'x-api-key': org.testKey } })
    expect(header.status).toBe(200)
    const created = await app.call('POST', '/v1/accounts', { headers: { 'x-api-key': org.testKey }, body: { externalId: 'via-header' } })
    expect(created.status).toBe(201)
  })

  test('refuses malformed, unknown and missing keys with 401 authentication_error and writes nothing', async () => {
    const before = await accountCount(org.id)
    const presentations: Array<Record<string, string>> = [
      { authorization: 'Bearer svc_test_tooShort' },
      { authorization: `Bearer svc_test_${'1'.repeat(44)}` },
      { authorization: `Bearer ${org.testKey.replace(/^svc_test_/, 'svc_secret_')}` },
      { authorization: `Bearer ${org.testKey}x` },
      { authorization: `Basic ${org.testKey}` },
      { authorization: `Bearer ${org.testKey} extra` },
      { authorization: '' },
      { 'x-api-key': 'nonsense' },
      { 'x-api-key': '' },
      {},
    ]
    for (const headers of presentations) {
      const response = await app.call('POST', '/v1/accounts', { headers, body: { externalId: 'never-minted' } })
      expectAuthenticationError(response)
    }
    expect(await accountCount(org.id)).toBe(before)
  })

  test('answers 401 before looking at the body', async () => {
    const response = await app.call('POST', '/v1/accounts', { headers: { 'x-api-key': 'nonsense' }, body: { bogus: true } })
    expectAuthenticationError(response)
  })
})

describe('publishable keys', () => {
  test('get 403 permission_denied on account routes, whatever the body, and create nothing', async () => {
    const org = await app.createOrg('Storefront')
    const before = await accountCount(org.id)
    for (const body of [{ externalId: 'from-browser' }, { bogus: true }]) {
      const response = await app.call('POST', '/v1/accounts', { key: org.publishableKey, body })
      expect(response.status).toBe(403)
      expect(response.body.error.code).toBe('permission_denied')
    }
    const list = await app.call('GET', '/v1/accounts', { key: org.publishableKey })
    expect(list.status).toBe(403)
    expect(list.body.error.code).toBe('permission_denied')
    expect(await accountCount(org.id)).toBe(before)
  })

  test('read the asset catalog', async () => {
    const org = await app.createOrg('Catalog reader')
    const response = await app.call('GET', '/v1/assets', { key: org.publishableKey })
    expect(response.status).toBe(200)
    expect(response.body.assets.length).toBeGreaterThan(0)
    expect(response.headers.get('x-ratelimit-limit')).toBe('100')
  })
})

describe('revocation', () => {
  test('rejects a revoked key on the very next request', async () => {
    const org = await app.createOrg('Revoker')
    expect((await app.call('GET', '/v1/accounts', { key: org.testKey })).status).toBe(200)
    const revoked = await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/revoke`)
    expect(revoked.status).toBe(200)
    expect(revoked.body.status).toBe('revoked')
    expect(revoked.body.revokedAt).not.toBeNull()
    const before = await accountCount(org.id)
    const next = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'after-revocation' } })
    expectAuthenticationError(next)
    expect(next.body.error.message).toContain('revoked')
    expect(await accountCount(org.id)).toBe(before)
    // The other key of the organization is untouched.
    expect((await app.call('GET', '/v1/assets', { key: org.publishableKey })).status).toBe(200)
    // Revoking again is harmless; rotating a revoked key is a conflict.
    expect((await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/revoke`)).body.status).toBe('revoked')
    expect((await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/rotate`, {})).status).toBe(409)
  })

  test('a row read before the revocation committed, answering after it, does not bring the key back', async () => {
    const org = await app.createOrg('Late refresh')
    const key = app.kassa.runtime.keys.lookup(org.testKey, Date.now())
    expect(key.ok).toBe(true)
    const before = key.ok ? key.key : undefined
    expect((await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/revoke`)).status).toBe(200)
    // What a refresh started before the revocation would hand the cache (this instance refreshes on
    // its own NOTIFY too): the key as it was.
    app.kassa.runtime.keys.upsertKey({ ...before!, revoked: false, expiresAtMs: null })
    expectAuthenticationError(await app.call('GET', '/v1/accounts', { key: org.testKey }))
  })

  test('answers 404 for revoking a key that does not exist', async () => {
    const response = await app.ops('POST', '/ops/v1/keys/key_00000000000000000000000000000000/revoke')
    expect(response.status).toBe(404)
    expect(response.body.error.code).toBe('not_found')
  })

  test('a revocation reaches another instance on the same database', async () => {
    const org = await signedOffOrg('Shared revocation')
    const issued = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'production' })
    // The production instance hears of the new key by NOTIFY.
    await waitFor(async () => (await callProduction('GET', '/v1/accounts', issued.body.key)).status === 200)
    await app.ops('POST', `/ops/v1/keys/${issued.body.id}/revoke`)
    await waitFor(async () => (await callProduction('GET', '/v1/accounts', issued.body.key)).status === 401)
  })
})

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 3000): Promise<void> {
  // Unhurried polling: a refused key counts against the anonymous per-IP limit of 30 a minute.
  await eventually(condition, { what: 'the key change seen', timeoutMs, intervalMs: 50 })
}

describe('rotation', () => {
  test('issues a new key; the old one keeps working within the overlap and stops after it', async () => {
    const org = await app.createOrg('Rotator')
    const rotated = await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/rotate`, { overlapSeconds: 1 })
    expect(rotated.status).toBe(201)
    expect(rotated.body.key.key).toMatch(/^svc_test_/)
    expect(rotated.body.key.key).not.toBe(org.testKey)
    expect(rotated.body.key).toMatchObject({ type: 'test', environment: 'sandbox' })
    expect(rotated.body.previous).toMatchObject({ id: org.testKeyId, status: 'expiring', replacedByKeyId: rotated.body.key.id })
    const newKey = rotated.body.key.key as string
    expect((await app.call('GET', '/v1/accounts', { key: org.testKey })).status).toBe(200)
    expect((await app.call('GET', '/v1/accounts', { key: newKey })).status).toBe(200)
    wallAheadMs += 1_200
    const before = await accountCount(org.id)
    const old = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'with-expired-key' } })
    expectAuthenticationError(old)
    expect(old.body.error.message).toContain('expired')
    expect(await accountCount(org.id)).toBe(before)
    expect((await app.call('POST', '/v1/accounts', { key: newKey, body: { externalId: 'with-new-key' } })).status).toBe(201)
    const described = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    const statuses = Object.fromEntries((described.body.keys as Array<{ id: string; status: string }>).map((key) => [key.id, key.status]))
    expect(statuses[org.testKeyId]).toBe('expired')
    expect(statuses[rotated.body.key.id]).toBe('active')
  })

  test('keeps the old key for 24 hours when no overlap is given', async () => {
    const org = await app.createOrg('Default overlap')
    const before = Date.now()
    const rotated = await app.ops('POST', `/ops/v1/keys/${org.publishableKeyId}/rotate`)
    expect(rotated.status).toBe(201)
    expect(rotated.body.key.key).toMatch(/^svc_pub_/)
    const overlapMs = Date.parse(rotated.body.previous.expiresAt) - before
    expect(overlapMs).toBeGreaterThan(24 * 3600 * 1000 - 60_000)
    expect(overlapMs).toBeLessThanOrEqual(24 * 3600 * 1000 + 60_000)
    expect((await app.call('GET', '/v1/assets', { key: org.publishableKey })).status).toBe(200)
  })

  test('refuses to rotate a key that is already expiring, and a negative overlap', async () => {
    const org = await app.createOrg('Double rotation')
    const negative = await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/rotate`, { overlapSeconds: -5 })
    expect(negative.status).toBe(400)
    expect(negative.body.error.field).toBe('overlapSeconds')
    expect((await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/rotate`, { overlapSeconds: 60 })).status).toBe(201)
    const again = await app.ops('POST', `/ops/v1/keys/${org.testKeyId}/rotate`, { overlapSeconds: 60 })
    expect(again.status).toBe(409)
    expect(again.body.error.code).toBe('conflict')
    const described = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    expect(described.body.keys.filter((key: { type: string }) => key.type === 'test')).toHaveLength(2)
  })

  test('of eight concurrent rotations of one key exactly one succeeds and leaves one replacement', async () => {
    const org = await app.createOrg('Racing rotations')
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => app.ops('POST', `/ops/v1/keys/${org.testKeyId}/rotate`, { overlapSeconds: 60 })),
    )
    expect(answers.filter((answer) => answer.status === 201)).toHaveLength(1)
    expect(answers.filter((answer) => answer.status === 409).every((answer) => answer.body.error.code === 'conflict')).toBe(true)
    const described = await app.ops('GET', `/ops/v1/orgs/${org.id}`)
    const testKeys = described.body.keys.filter((key: { type: string }) => key.type === 'test')
    expect(testKeys).toHaveLength(2)
    expect(testKeys.filter((key: { status: string }) => key.status === 'active')).toHaveLength(1)
  })
})

describe('stored keys', () => {
  test('the database stores only a hash of each key', async () => {
    const created = await app.ops('POST', '/ops/v1/orgs', { name: 'Hash only' })
    const org = await signedOffOrg('Hash only, production')
    const production = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'production' })
    const secrets = [...(created.body.keys as Array<{ key: string }>).map((key) => key.key), production.body.key as string, org.testKey]
    const rows = await queryRows<Record<string, unknown>>(app.kassa.runtime.db, sql`select * from api_keys`)
    expect(rows.length).toBeGreaterThanOrEqual(secrets.length)
    const stored = JSON.stringify(rows)
    for (const secret of secrets) {
      expect(stored).not.toContain(secret)
      // Nor the random part alone.
      expect(stored).not.toContain(secret.replace(/^svc_[a-z]+_/, ''))
    }
    const hashes = rows.map((row) => row.key_hash)
    for (const hash of hashes) expect(hash).toMatch(/^[0-9a-f]{64}$/)
  })
})

describe('environments', () => {
  test('a production key is 401 on the sandbox server and works on the production server', async () => {
    const org = await signedOffOrg('Two worlds')
    const issued = await app.ops('POST', `/ops/v1/orgs/${org.id}/keys`, { type: 'secret', environment: 'production' })
    expect(issued.status).toBe(201)
    const before = await accountCount(org.id)
    const onSandbox = await app.call('POST', '/v1/accounts', { key: issued.body.key, body: { externalId: 'wrong-world' } })
    expectAuthenticationError(onSandbox)
    expect(onSandbox.body.error.message).toContain('environment')
    expect(await accountCount(org.id)).toBe(before)
    await waitFor(async () => (await callProduction('GET', '/v1/accounts', issued.body.key)).status === 200)
  })

  test('sandbox test and publishable keys are 401 on the production server', async () => {
    const org = await app.createOrg('Sandbox only')
    // Once the production instance knows the keys, it refuses them as the other environment's.
    for (const key of [org.testKey, org.publishableKey]) {
      await waitFor(async () => (await callProduction('GET', '/v1/assets', key)).body.error?.message?.includes('environment') === true)
      expectAuthenticationError(await callProduction('GET', '/v1/accounts', key))
      expectAuthenticationError(await callProduction('GET', '/v1/assets', key))
    }
    await waitFor(async () => production.runtime.keys.org(org.id) !== undefined)
    // Without a key the public catalog still answers on production.
    const anonymous = await production.app.handle(new Request('http://kassa.test/v1/assets'))
    expect(anonymous.status).toBe(200)
  })
})
