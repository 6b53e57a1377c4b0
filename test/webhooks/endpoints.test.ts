import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'

let app: TestApp
let org: TestOrg
let other: TestOrg

beforeAll(async () => {
  // Production-like URL rules: loopback refused like any other local address.
  app = await startTestApp({ allowLoopbackWebhooks: false, webhookDelivery: false })
  org = await app.createOrg('Endpoints')
  other = await app.createOrg('Other')
})
afterAll(async () => {
  await app.close()
})

const URL_OK = 'https://hooks.example.com/kassa'

async function endpointRows(): Promise<Array<{ id: string; url: string; events: string[]; deleted_at: Date | null }>> {
  return queryRows(app.kassa.runtime.db, sql`select id, url, events, deleted_at from webhook_endpoints order by id`)
}

async function create(key: string, body: unknown) {
  return app.call('POST', '/v1/webhooks', { key, body })
}

describe('webhook endpoints', () => {
  test('registers an endpoint and shows its secret only at creation', async () => {
    const created = await create(org.testKey, { url: URL_OK, events: ['account.created', 'transaction.*'] })
    expect(created.status).toBe(201)
    expect(created.body).toEqual({ id: expect.stringMatching(/^wh_[0-9a-f]{32}$/), url: URL_OK, events: ['account.created', 'transaction.*'], secret: expect.stringMatching(/^whsec_\w{30,}$/), createdAt: expect.any(String) })
    const listed = await app.call('GET', '/v1/webhooks', { key: org.testKey })
    expect(listed.body.webhooks).toEqual([{ id: created.body.id, url: URL_OK, events: ['account.created', 'transaction.*'], createdAt: created.body.createdAt }])
    expect(JSON.stringify(listed.body)).not.toContain('whsec_')
    const read = await app.call('GET', `/v1/webhooks/${created.body.id}`, { key: org.testKey })
    expect(read.body).toEqual(listed.body.webhooks[0])
  })

  test('changes only the fields sent, and refuses an empty change', async () => {
    const { body: endpoint } = await create(org.testKey, { url: URL_OK, events: ['*'] })
    const patched = await app.call('PATCH', `/v1/webhooks/${endpoint.id}`, { key: org.testKey, body: { events: ['vault.*'] } })
    expect(patched.status).toBe(200)
    expect(patched.body).toEqual({ id: endpoint.id, url: URL_OK, events: ['vault.*'], createdAt: endpoint.createdAt })
    const moved = await app.call('PATCH', `/v1/webhooks/${endpoint.id}`, { key: org.testKey, body: { url: 'https://other.example.org/in' } })
    expect(moved.body).toMatchObject({ url: 'https://other.example.org/in', events: ['vault.*'] })
    const empty = await app.call('PATCH', `/v1/webhooks/${endpoint.id}`, { key: org.testKey, body: {} })
    expect(empty.status).toBe(400)
    expect(empty.body.error.code).toBe('invalid_request')
    const refused = await app.call('PATCH', `/v1/webhooks/${endpoint.id}`, { key: org.testKey, body: { url: 'https://10.0.0.8/in' } })
    expect(refused.status).toBe(400)
    expect(refused.body.error).toMatchObject({ code: 'invalid_request', field: 'url' })
    expect((await app.call('GET', `/v1/webhooks/${endpoint.id}`, { key: org.testKey })).body.url).toBe('https://other.example.org/in')
  })

  test('rotates the secret: the new one is answered once, with the end of the overlap', async () => {
    const { body: endpoint } = await create(org.testKey, { url: URL_OK, events: ['*'] })
    const rotated = await app.call('POST', `/v1/webhooks/${endpoint.id}/rotate-secret`, { key: org.testKey })
    expect(rotated.status).toBe(200)
    expect(rotated.body).toEqual({ secret: expect.stringMatching(/^whsec_/), previousSecretValidUntil: expect.any(String) })
    const [row] = await queryRows<{ secret: string; previous_secret: string }>(app.kassa.runtime.db, sql`select secret, previous_secret from webhook_endpoints where id = ${endpoint.id}`)
    expect(row).toEqual({ secret: rotated.body.secret, previous_secret: endpoint.secret })
  })

  test.each([
    ['no url', { events: ['*'] }, 'url'],
    ['an http url', { url: 'http://hooks.example.com/', events: ['*'] }, 'url'],
    ['a loopback url', { url: 'https://127.0.0.1/hook', events: ['*'] }, 'url'],
    ['a metadata url', { url: 'https://169.254.169.254/latest', events: ['*'] }, 'url'],
    ['IPv4-compatible IPv6 loopback', { url: 'https://[::127.0.0.1]/hook', events: ['*'] }, 'url'],
    ['IPv4-compatible IPv6 metadata', { url: 'https://[::169.254.169.254]/hook', events: ['*'] }, 'url'],
    ['IPv4-compatible IPv6 private', { url: 'https://[::10.0.0.1]/hook', events: ['*'] }, 'url'],
    ['a url that is not a url', { url: 'hooks', events: ['*'] }, 'url'],
    ['no events', { url: URL_OK, events: [] }, 'events'],
    ['an unknown namespace', { url: URL_OK, events: ['billing.*'] }, 'events'],
    ['a partial wildcard', { url: URL_OK, events: ['account.cre*'] }, 'events'],
    ['a duplicated subscription', { url: URL_OK, events: ['*', '*'] }, 'events'],
    ['an unknown field', { url: URL_OK, events: ['*'], secret: 'whsec_mine' }, 'secret'],
  ])('refuses %s as invalid_request naming the field, and writes nothing', async (_name, body, field) => {
    const before = await endpointRows()
    const response = await create(org.testKey, body)
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toContain(field)
    expect(await endpointRows()).toEqual(before)
  })

  test('needs a secret or test key', async () => {
    const before = await endpointRows()
    expect((await create(org.publishableKey, { url: URL_OK, events: ['*'] })).status).toBe(403)
    expect((await app.call('GET', '/v1/webhooks', { key: org.publishableKey })).status).toBe(403)
    expect((await app.call('POST', '/v1/webhooks', { body: { url: URL_OK, events: ['*'] } })).status).toBe(401)
    expect(await endpointRows()).toEqual(before)
  })

  test("cannot see, change, rotate or delete another organization's endpoint", async () => {
    const { body: theirs } = await create(other.testKey, { url: URL_OK, events: ['*'] })
    const before = await endpointRows()
    expect((await app.call('GET', `/v1/webhooks/${theirs.id}`, { key: org.testKey })).status).toBe(404)
    expect((await app.call('PATCH', `/v1/webhooks/${theirs.id}`, { key: org.testKey, body: { events: ['vault.*'] } })).status).toBe(404)
    expect((await app.call('POST', `/v1/webhooks/${theirs.id}/rotate-secret`, { key: org.testKey })).status).toBe(404)
    expect((await app.call('DELETE', `/v1/webhooks/${theirs.id}`, { key: org.testKey })).status).toBe(404)
    expect((await app.call('GET', '/v1/webhooks', { key: org.testKey })).body.webhooks.map((entry: { id: string }) => entry.id)).not.toContain(theirs.id)
    expect(await endpointRows()).toEqual(before)
  })

  test('allows at most 10 live endpoints per organization, also when created concurrently; a deletion frees a place', async () => {
    const limited = await app.createOrg('Limited')
    const attempts = await Promise.all(Array.from({ length: 14 }, (_, index) => create(limited.testKey, { url: `https://hooks.example.com/${index}`, events: ['*'] })))
    expect(attempts.filter((response) => response.status === 201)).toHaveLength(10)
    const refusals = attempts.filter((response) => response.status !== 201)
    expect(refusals).toHaveLength(4)
    for (const refusal of refusals) expect({ status: refusal.status, code: refusal.body.error.code }).toEqual({ status: 422, code: 'limit_exceeded' })
    const list = await app.call('GET', '/v1/webhooks', { key: limited.testKey })
    expect(list.body.webhooks).toHaveLength(10)
    expect((await app.call('DELETE', `/v1/webhooks/${list.body.webhooks[0].id}`, { key: limited.testKey })).body).toEqual({ id: list.body.webhooks[0].id, deleted: true })
    expect((await create(limited.testKey, { url: URL_OK, events: ['*'] })).status).toBe(201)
    expect((await create(limited.testKey, { url: URL_OK, events: ['*'] })).status).toBe(422)
  })

  test('a deleted endpoint is gone from the API but kept for the event log', async () => {
    const { body: endpoint } = await create(org.testKey, { url: URL_OK, events: ['*'] })
    expect((await app.call('DELETE', `/v1/webhooks/${endpoint.id}`, { key: org.testKey })).status).toBe(200)
    expect((await app.call('DELETE', `/v1/webhooks/${endpoint.id}`, { key: org.testKey })).status).toBe(404)
    expect((await app.call('POST', `/v1/webhooks/${endpoint.id}/rotate-secret`, { key: org.testKey })).status).toBe(404)
    const [row] = (await endpointRows()).filter((entry) => entry.id === endpoint.id)
    expect(row!.deleted_at).not.toBeNull()
  })
})
