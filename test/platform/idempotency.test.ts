import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { idempotencyRecords } from '../../db/schema/index.ts'
import { sha256Hex } from '../../server/lib/hash.ts'
import { canonicalJson } from '../../server/platform/idempotency.ts'
import { startTestApp, type TestApp, type TestOrg, type TestResponse } from '../support/app.ts'

let app: TestApp
let org: TestOrg

beforeAll(async () => {
  app = await startTestApp()
  org = await app.createOrg('Idempotent')
})
afterAll(async () => {
  await app.close()
})

async function accountCount(orgId = org.id): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from accounts where org_id = ${orgId}`)
  return row!.count
}

async function recordCount(): Promise<number> {
  const [row] = await queryRows<{ count: number }>(app.kassa.runtime.db, sql`select count(*)::int as count from idempotency_records`)
  return row!.count
}

/** What another instance leaves behind while it runs a request (or after it died running it). */
async function insertClaim(key: string, body: Record<string, unknown>, lockedUntilMs: number): Promise<void> {
  await app.kassa.runtime.db.insert(idempotencyRecords).values({
    orgId: org.id,
    key,
    method: 'POST',
    path: '/v1/accounts',
    requestHash: sha256Hex(`POST /v1/accounts\n${canonicalJson(body)}`),
    requestBody: body,
    state: 'in_progress',
    lockedUntil: new Date(lockedUntilMs),
    expiresAt: new Date(Date.now() + 24 * 3600_000),
  })
}

function mint(key: string, body: unknown, idempotencyKey: string): Promise<TestResponse> {
  return app.call('POST', '/v1/accounts', { key, body, headers: { 'idempotency-key': idempotencyKey } })
}

describe('replays', () => {
  test('replays the first status and body for the same key and body, says so, and creates nothing new', async () => {
    const first = await mint(org.testKey, { externalId: 'replay-1', metadata: { a: '1', b: '2' } }, 'replay-key-1')
    expect(first.status).toBe(201)
    expect(first.headers.get('idempotent-replayed')).toBeNull()
    const count = await accountCount()
    // Key order in the body does not matter: the same body is the same request.
    const second = await mint(org.testKey, { metadata: { b: '2', a: '1' }, externalId: 'replay-1' }, 'replay-key-1')
    expect(second.status).toBe(201)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    expect(second.body).toEqual(first.body)
    expect(second.headers.get('content-type')).toContain('application/json')
    expect(second.headers.get('x-request-id')).not.toBe(first.headers.get('x-request-id'))
    const third = await mint(org.testKey, { externalId: 'replay-1', metadata: { a: '1', b: '2' } }, 'replay-key-1')
    expect(third.headers.get('idempotent-replayed')).toBe('true')
    expect(third.body).toEqual(first.body)
    expect(await accountCount()).toBe(count)
  })

  test('without a key, repeating a mint is answered by the service rules, not replayed', async () => {
    const first = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'no-key' } })
    const second = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'no-key' } })
    expect(first.status).toBe(201)
    expect(second.status).toBe(200)
    expect(second.headers.get('idempotent-replayed')).toBeNull()
  })

  test('replays a failure answered after the key was claimed', async () => {
    const path = '/v1/accounts/acct_00000000000000000000000000000000/kyc'
    const body = { attestation: 'a.b.c' }
    const headers = { 'idempotency-key': 'failure-key' }
    const first = await app.call('POST', path, { key: org.testKey, body, headers })
    expect(first.status).toBe(404)
    const second = await app.call('POST', path, { key: org.testKey, body, headers })
    expect(second.status).toBe(404)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    expect(second.body).toEqual(first.body)
  })
})

describe('conflicts', () => {
  test('the same key with a different body is 409 idempotency_conflict naming the differing field', async () => {
    const first = await mint(org.testKey, { externalId: 'conflict-1', type: 'individual' }, 'conflict-key')
    expect(first.status).toBe(201)
    const count = await accountCount()
    const second = await mint(org.testKey, { externalId: 'conflict-1', type: 'business' }, 'conflict-key')
    expect(second.status).toBe(409)
    expect(second.body.error.code).toBe('idempotency_conflict')
    expect(second.body.error.field).toBe('type')
    expect(second.body.error.message).toContain('type')
    expect(second.headers.get('idempotent-replayed')).toBeNull()
    const third = await mint(org.testKey, { externalId: 'conflict-2' }, 'conflict-key')
    expect(third.body.error.code).toBe('idempotency_conflict')
    expect(third.body.error.message).toContain('externalId')
    expect(await accountCount()).toBe(count)
    // The first answer is still what the original request replays.
    const replay = await mint(org.testKey, { externalId: 'conflict-1', type: 'individual' }, 'conflict-key')
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.body).toEqual(first.body)
  })

  test('the same key on another route is a conflict on the key itself', async () => {
    await mint(org.testKey, { externalId: 'route-1' }, 'route-key')
    const response = await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body: { seconds: 1 }, headers: { 'idempotency-key': 'route-key' } })
    expect(response.status).toBe(409)
    expect(response.body.error.code).toBe('idempotency_conflict')
    expect(response.body.error.field).toBe('Idempotency-Key')
  })

  test('a retry while the first request is still running is 409 idempotency_in_progress', async () => {
    await insertClaim('running-key', { externalId: 'running-1' }, Date.now() + 60_000)
    const count = await accountCount()
    const response = await mint(org.testKey, { externalId: 'running-1' }, 'running-key')
    expect(response.status).toBe(409)
    expect(response.body.error.code).toBe('idempotency_in_progress')
    expect(await accountCount()).toBe(count)
    // A different body under the running key is still a conflict, not "in progress".
    const different = await mint(org.testKey, { externalId: 'running-2' }, 'running-key')
    expect(different.body.error.code).toBe('idempotency_conflict')
    expect(await accountCount()).toBe(count)
  })

  test('a claim abandoned by a dead process is taken over once its lock has lapsed', async () => {
    await insertClaim('abandoned-key', { externalId: 'abandoned-1' }, Date.now() - 1000)
    const response = await mint(org.testKey, { externalId: 'abandoned-1' }, 'abandoned-key')
    expect(response.status).toBe(201)
    const replay = await mint(org.testKey, { externalId: 'abandoned-1' }, 'abandoned-key')
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.body.id).toBe(response.body.id)
  })

  test('two concurrent requests with one key create one account', async () => {
    const count = await accountCount()
    const answers = await Promise.all([0, 1, 2, 3].map(() => mint(org.testKey, { externalId: 'concurrent-1' }, 'concurrent-key')))
    const created = answers.filter((answer) => answer.status === 201 && answer.headers.get('idempotent-replayed') === null)
    expect(created).toHaveLength(1)
    for (const answer of answers) {
      if (answer.status === 201) expect(answer.body.id).toBe(created[0]!.body.id)
      else {
        expect(answer.status).toBe(409)
        expect(answer.body.error.code).toBe('idempotency_in_progress')
      }
    }
    expect(await accountCount()).toBe(count + 1)
  })
})

describe('scope', () => {
  test('a key is scoped to the organization: two organizations use the same key independently', async () => {
    const other = await app.createOrg('Other tenant')
    const mine = await mint(org.testKey, { externalId: 'shared-1' }, 'shared-key')
    const theirs = await mint(other.testKey, { externalId: 'shared-2' }, 'shared-key')
    expect(mine.status).toBe(201)
    expect(theirs.status).toBe(201)
    expect(theirs.headers.get('idempotent-replayed')).toBeNull()
    expect(theirs.body.externalId).toBe('shared-2')
    expect(theirs.body.id).not.toBe(mine.body.id)
    expect(await accountCount(other.id)).toBe(1)
    // Each organization replays its own answer.
    expect((await mint(other.testKey, { externalId: 'shared-2' }, 'shared-key')).body.id).toBe(theirs.body.id)
    expect((await mint(org.testKey, { externalId: 'shared-1' }, 'shared-key')).body.id).toBe(mine.body.id)
  })

  test('public reads without a key are never deduplicated nor recorded', async () => {
    const before = await recordCount()
    for (let i = 0; i < 2; i++) {
      const response = await app.call('GET', '/v1/assets', { headers: { 'idempotency-key': 'public-key' } })
      expect(response.status).toBe(200)
      expect(response.headers.get('idempotent-replayed')).toBeNull()
    }
    expect(await recordCount()).toBe(before)
  })
})

describe('refused requests', () => {
  test('a request refused by validation is not saved: the same key with a corrected body succeeds', async () => {
    const before = await recordCount()
    const refused = await mint(org.testKey, { externalId: 'not valid!' }, 'fix-me-key')
    expect(refused.status).toBe(400)
    expect(refused.body.error.code).toBe('invalid_request')
    expect(await recordCount()).toBe(before)
    const fixed = await mint(org.testKey, { externalId: 'fixed-1' }, 'fix-me-key')
    expect(fixed.status).toBe(201)
    expect(fixed.headers.get('idempotent-replayed')).toBeNull()
  })

  test('a request refused as invalid by the service after the claim releases the key', async () => {
    const count = await accountCount()
    const refused = await mint(org.testKey, { externalId: 'bad-kyc', kycAttestation: 'not.a.jws' }, 'kyc-key')
    expect(refused.status).toBe(400)
    expect(refused.body.error.code).toBe('invalid_request')
    expect(await accountCount()).toBe(count)
    const [row] = await queryRows<{ count: number }>(
      app.kassa.runtime.db,
      sql`select count(*)::int as count from idempotency_records where org_id = ${org.id} and key = 'kyc-key'`,
    )
    expect(row!.count).toBe(0)
    const fixed = await mint(org.testKey, { externalId: 'bad-kyc' }, 'kyc-key')
    expect(fixed.status).toBe(201)
    expect(await accountCount()).toBe(count + 1)
  })

  test('refused credentials and permissions claim no key', async () => {
    const before = await recordCount()
    const anonymous = await app.call('POST', '/v1/accounts', { body: { externalId: 'anon' }, headers: { 'idempotency-key': 'auth-key' } })
    expect(anonymous.status).toBe(401)
    const publishable = await mint(org.publishableKey, { externalId: 'pub' }, 'auth-key')
    expect(publishable.status).toBe(403)
    expect(await recordCount()).toBe(before)
    expect((await mint(org.testKey, { externalId: 'after-refusals' }, 'auth-key')).status).toBe(201)
  })

  test('a malformed Idempotency-Key is invalid_request naming the header, and creates nothing', async () => {
    const count = await accountCount()
    for (const key of ['has space', 'x'.repeat(256)]) {
      const response = await mint(org.testKey, { externalId: 'bad-key' }, key)
      expect(response.status).toBe(400)
      expect(response.body.error.code).toBe('invalid_request')
      expect(response.body.error.field).toBe('Idempotency-Key')
    }
    expect(await accountCount()).toBe(count)
  })
})
