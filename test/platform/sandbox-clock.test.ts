import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { createApp, type Kassa } from '../../server/app.ts'
import { configForTests } from '../support/config.ts'
import { CHANGE_CHANNEL } from '../../server/platform/changes.ts'
import { ONBOARDING_ITEMS } from '../../server/modules/orgs/model.ts'
import { startTestApp, type TestApp, type TestOrg, type TestResponse } from '../support/app.ts'

const HOUR_MS = 3600 * 1000

let app: TestApp
let org: TestOrg

beforeAll(async () => {
  app = await startTestApp()
  org = await app.createOrg('Time traveller')
})
afterAll(async () => {
  await app.close()
})

async function clockMs(key: string): Promise<number> {
  const response = await app.call('GET', '/v1/sandbox/clock', { key })
  expect(response.status).toBe(200)
  return Date.parse(response.body.now)
}

describe('sandbox clock', () => {
  test('a test key advances its own organization clock, and GET shows the new time', async () => {
    const before = await clockMs(org.testKey)
    expect(Math.abs(before - Date.now())).toBeLessThan(60_000)
    const advanced = await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body: { seconds: 48 * 3600 } })
    expect(advanced.status).toBe(200)
    const answered = Date.parse(advanced.body.now)
    expect(answered - before).toBeGreaterThanOrEqual(48 * HOUR_MS)
    expect(answered - before).toBeLessThan(48 * HOUR_MS + 60_000)
    const after = await clockMs(org.testKey)
    expect(after).toBeGreaterThanOrEqual(answered)
    expect(after - answered).toBeLessThan(60_000)
    // Advances add up.
    await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body: { seconds: 3600 } })
    expect((await clockMs(org.testKey)) - before).toBeGreaterThanOrEqual(49 * HOUR_MS)
  })

  test('an offset read late never moves the clock back: a stale read after a later advance leaves the later time', async () => {
    const traveller = await app.createOrg('Late reader')
    await app.call('POST', '/v1/sandbox/clock/advance', { key: traveller.testKey, body: { seconds: 2 * 3600 } })
    const advanced = await clockMs(traveller.testKey)
    // What a read taken before that advance committed would answer (this instance refreshes on its
    // own NOTIFY, and that read can answer after a later advance): the row one hour behind.
    await app.kassa.runtime.db.execute(sql`update org_clocks set offset_ms = offset_ms - ${3600 * 1000} where org_id = ${traveller.id}`)
    await app.kassa.runtime.clock.refresh(traveller.id)
    expect(await clockMs(traveller.testKey)).toBeGreaterThanOrEqual(advanced)
    // A later advance still adds to what the database holds.
    const next = await app.call('POST', '/v1/sandbox/clock/advance', { key: traveller.testKey, body: { seconds: 2 * 3600 } })
    expect(next.status).toBe(200)
    expect(Date.parse(next.body.now)).toBeGreaterThanOrEqual(advanced)
  })

  test("does not move another organization's clock", async () => {
    const other = await app.createOrg('Bystander')
    await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body: { seconds: 24 * 3600 } })
    expect(Math.abs((await clockMs(other.testKey)) - Date.now())).toBeLessThan(60_000)
  })

  test('a publishable key gets 403 permission_denied and the clock stays put', async () => {
    const before = await clockMs(org.testKey)
    const advanced = await app.call('POST', '/v1/sandbox/clock/advance', { key: org.publishableKey, body: { seconds: 3600 } })
    expect(advanced.status).toBe(403)
    expect(advanced.body.error.code).toBe('permission_denied')
    const read = await app.call('GET', '/v1/sandbox/clock', { key: org.publishableKey })
    expect(read.status).toBe(403)
    expect((await clockMs(org.testKey)) - before).toBeLessThan(60_000)
  })

  test('no key is 401 and the clock stays put', async () => {
    const before = await clockMs(org.testKey)
    const advanced = await app.call('POST', '/v1/sandbox/clock/advance', { body: { seconds: 3600 } })
    expect(advanced.status).toBe(401)
    expect(advanced.body.error.code).toBe('authentication_error')
    expect((await clockMs(org.testKey)) - before).toBeLessThan(60_000)
  })

  test.each([
    ['zero seconds', { seconds: 0 }],
    ['null seconds', { seconds: null }],
    ['negative seconds', { seconds: -3600 }],
    ['fractional seconds', { seconds: 1.5 }],
    ['more than a year', { seconds: 367 * 24 * 3600 }],
    ['no seconds', {}],
    ['an unknown field', { seconds: 60, backwards: true }],
  ])('refuses an advance with %s as invalid_request naming the field, and the clock stays put', async (_name, body) => {
    const before = await clockMs(org.testKey)
    const response = await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body })
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe('backwards' in body ? 'backwards' : 'seconds')
    expect((await clockMs(org.testKey)) - before).toBeLessThan(60_000)
  })
})

describe('production', () => {
  test('has no sandbox clock: the routes answer 404 even to a valid production key', async () => {
    const signedOff = await app.createOrg('Live')
    const items = Object.fromEntries(ONBOARDING_ITEMS.map((item) => [item, true]))
    await app.ops('PATCH', `/ops/v1/orgs/${signedOff.id}/onboarding`, { items })
    await app.ops('POST', `/ops/v1/orgs/${signedOff.id}/onboarding/sign-off`, { signedOffBy: 'ops@kassa.test' })
    const issued = await app.ops('POST', `/ops/v1/orgs/${signedOff.id}/keys`, { type: 'secret', environment: 'production' })
    expect(issued.status).toBe(201)
    const production: Kassa = await createApp(configForTests({ serviceEnv: 'production', databaseUrl: app.database.databaseUrl }), {
      database: await app.database.open(),
    })
    try {
      const call = async (method: string, path: string, body?: unknown): Promise<TestResponse> => {
        const response = await production.app.handle(
          new Request(`http://kassa.test${path}`, {
            method,
            headers: { authorization: `Bearer ${issued.body.key}`, 'content-type': 'application/json' },
            body: body === undefined ? undefined : JSON.stringify(body),
          }),
        )
        return { status: response.status, headers: response.headers, body: await response.json() }
      }
      // The key is valid there: the same key reads accounts.
      expect((await call('GET', '/v1/accounts')).status).toBe(200)
      const advanced = await call('POST', '/v1/sandbox/clock/advance', { seconds: 3600 })
      expect(advanced.status).toBe(404)
      expect(advanced.body.error.code).toBe('not_found')
      expect((await call('GET', '/v1/sandbox/clock')).status).toBe(404)
      expect(production.runtime.clock.nowMs(signedOff.id) - Date.now()).toBeLessThan(60_000)
    } finally {
      // The database handle is the test database's; it closes with the sandbox app.
      for (const stop of production.runtime.stoppers.splice(0)) await stop()
    }
  })
})

describe('an instance starting while another changes what it caches', () => {
  test('a clock advanced and a key revoked after its caches were read, before it listened, still reach it', async () => {
    const mover = await app.createOrg('Moved while another starts')
    const before = await clockMs(mover.testKey)
    const handle = await app.database.open()
    // Both changes commit, and their notices go out, at the last moment before the new instance
    // listens: after its caches were read, if it read them first.
    let changed = false
    const listening: typeof handle = {
      ...handle,
      async listen(channel, onPayload) {
        if (channel !== CHANGE_CHANNEL || changed) return handle.listen(channel, onPayload)
        changed = true
        expect((await app.call('POST', '/v1/sandbox/clock/advance', { key: mover.testKey, body: { seconds: 7 * 24 * 3600 } })).status).toBe(200)
        expect((await app.ops('POST', `/ops/v1/keys/${mover.testKeyId}/revoke`)).status).toBe(200)
        return handle.listen(channel, onPayload)
      },
    }
    const second: Kassa = await createApp(configForTests({ databaseUrl: app.database.databaseUrl }), { database: listening })
    try {
      expect(second.runtime.clock.nowMs(mover.id) - before).toBeGreaterThanOrEqual(7 * 24 * HOUR_MS - 60_000)
      const refused = await second.app.handle(new Request('http://kassa.test/v1/accounts', { headers: { authorization: `Bearer ${mover.testKey}` } }))
      expect(refused.status).toBe(401)
    } finally {
      // The database handle is the test database's; it closes with the sandbox app.
      for (const stop of second.runtime.stoppers.splice(0)) await stop()
    }
  })
})
