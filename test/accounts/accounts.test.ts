import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { and, eq, sql } from 'drizzle-orm'
import { accounts, events } from '../../db/schema/index.ts'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'

let app: TestApp
let org: TestOrg

beforeAll(async () => {
  app = await startTestApp()
  org = await app.createOrg()
})
afterAll(async () => {
  await app.close()
})

async function accountCount(orgId: string): Promise<number> {
  const rows = await app.kassa.runtime.db.select({ id: accounts.id }).from(accounts).where(eq(accounts.orgId, orgId))
  return rows.length
}

async function createdEventsFor(orgId: string, externalId: string) {
  return app.kassa.runtime.db
    .select()
    .from(events)
    .where(and(eq(events.orgId, orgId), eq(events.type, 'account.created'), sql`${events.data}->>'externalId' = ${externalId}`))
}

function mint(key: string, body: unknown) {
  return app.call('POST', '/v1/accounts', { key, body })
}

describe('minting accounts', () => {
  test('minting an existing externalId returns the same account, never a second one', async () => {
    const first = await mint(org.testKey, { externalId: 'user-1' })
    expect(first.status).toBe(201)
    expect(first.body.id).toMatch(/^acct_[0-9a-f]{32}$/)
    expect(first.body).toMatchObject({ externalId: 'user-1', type: 'individual', status: 'active', metadata: {}, kyc: null })
    const second = await mint(org.testKey, { externalId: 'user-1' })
    expect(second.status).toBe(200)
    expect(second.body.id).toBe(first.body.id)
    const list = await app.call('GET', '/v1/accounts?externalId=user-1', { key: org.testKey })
    expect(list.body.accounts).toHaveLength(1)
    expect(await createdEventsFor(org.id, 'user-1')).toHaveLength(1)
  })

  test('twenty concurrent mints of one externalId make exactly one account and one account.created event', async () => {
    const responses = await Promise.all(Array.from({ length: 20 }, () => mint(org.testKey, { externalId: 'race-1', type: 'business' })))
    const statuses = responses.map((response) => response.status).sort()
    expect(statuses.filter((status) => status === 201)).toHaveLength(1)
    expect(statuses.filter((status) => status === 200)).toHaveLength(19)
    const ids = new Set(responses.map((response) => response.body.id))
    expect(ids.size).toBe(1)
    const rows = await app.kassa.runtime.db
      .select()
      .from(accounts)
      .where(and(eq(accounts.orgId, org.id), eq(accounts.externalId, 'race-1')))
    expect(rows).toHaveLength(1)
    const created = await createdEventsFor(org.id, 'race-1')
    expect(created).toHaveLength(1)
    expect(created[0]!.id).toMatch(/^evt_[0-9a-f]{32}$/)
  })

  test('account.created carries accountId, externalId and type', async () => {
    const minted = await mint(org.testKey, { externalId: 'evt-user', type: 'business', metadata: { tier: 'gold' } })
    expect(minted.status).toBe(201)
    const [event] = await createdEventsFor(org.id, 'evt-user')
    expect(event!.data).toEqual({ accountId: minted.body.id, externalId: 'evt-user', type: 'business' })
    expect(event!.orgId).toBe(org.id)
  })

  test.each([
    ['an empty externalId', { externalId: '' }, 'externalId'],
    ['an externalId with a space', { externalId: 'has space' }, 'externalId'],
    ['an externalId of 129 characters', { externalId: 'x'.repeat(129) }, 'externalId'],
    ['an externalId that is a number', { externalId: 42 }, 'externalId'],
    ['a missing externalId', { type: 'individual' }, 'externalId'],
    ['an unknown type', { externalId: 'bad-type', type: 'robot' }, 'type'],
    ['an unknown field', { externalId: 'unknown-field', nickname: 'bob' }, 'nickname'],
    ['metadata that is not strings', { externalId: 'bad-meta', metadata: { tier: 3 } }, 'metadata.tier'],
    ['a metadata key over 40 characters', { externalId: 'long-meta-key', metadata: { ['k'.repeat(41)]: 'v' } }, `metadata.${'k'.repeat(41)}`],
  ])('refuses %s with invalid_request naming the field and creates nothing', async (_name, body, field) => {
    const before = await accountCount(org.id)
    const response = await mint(org.testKey, body)
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe(field)
    expect(await accountCount(org.id)).toBe(before)
  })

  test('a publishable key cannot mint accounts', async () => {
    const before = await accountCount(org.id)
    const response = await mint(org.publishableKey, { externalId: 'from-browser' })
    expect(response.status).toBe(403)
    expect(response.body.error.code).toBe('permission_denied')
    expect(await accountCount(org.id)).toBe(before)
  })
})

describe('reading and listing accounts', () => {
  let pagedOrg: TestOrg
  const mintedIds: string[] = []

  beforeAll(async () => {
    pagedOrg = await app.createOrg('Paged Org')
    for (let index = 0; index < 5; index += 1) {
      const response = await mint(pagedOrg.testKey, { externalId: `paged-${index}` })
      mintedIds.push(response.body.id)
    }
  })

  test('pages with after and limit until hasMore is false', async () => {
    const seen: string[] = []
    const pages: Array<{ size: number; hasMore: boolean }> = []
    let after: string | undefined
    for (;;) {
      const query = after === undefined ? '?limit=2' : `?limit=2&after=${after}`
      const response = await app.call('GET', `/v1/accounts${query}`, { key: pagedOrg.testKey })
      expect(response.status).toBe(200)
      pages.push({ size: response.body.accounts.length, hasMore: response.body.hasMore })
      seen.push(...response.body.accounts.map((account: { id: string }) => account.id))
      if (!response.body.hasMore) break
      after = response.body.accounts.at(-1).id
    }
    expect(pages).toEqual([
      { size: 2, hasMore: true },
      { size: 2, hasMore: true },
      { size: 1, hasMore: false },
    ])
    expect(seen).toEqual(mintedIds)
  })

  test('a page exactly as long as what is left says hasMore false', async () => {
    const response = await app.call('GET', `/v1/accounts?limit=5`, { key: pagedOrg.testKey })
    expect(response.body.accounts).toHaveLength(5)
    expect(response.body.hasMore).toBe(false)
  })

  test('lists only the organization of the key', async () => {
    const response = await app.call('GET', '/v1/accounts?limit=200', { key: pagedOrg.testKey })
    expect(response.body.accounts.map((account: { id: string }) => account.id)).toEqual(mintedIds)
  })

  test.each([['0'], ['201'], ['abc'], ['1.5'], ['-1']])('refuses limit=%s with invalid_request naming limit', async (limit) => {
    const response = await app.call('GET', `/v1/accounts?limit=${limit}`, { key: pagedOrg.testKey })
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe('limit')
  })

  test('refuses an unknown query parameter naming it', async () => {
    const response = await app.call('GET', '/v1/accounts?color=blue', { key: pagedOrg.testKey })
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe('color')
  })

  test('finds one account by externalId, and none for an unknown one', async () => {
    const found = await app.call('GET', '/v1/accounts?externalId=paged-3', { key: pagedOrg.testKey })
    expect(found.status).toBe(200)
    expect(found.body.accounts.map((account: { id: string }) => account.id)).toEqual([mintedIds[3]])
    expect(found.body.hasMore).toBe(false)
    const missing = await app.call('GET', '/v1/accounts?externalId=nobody', { key: pagedOrg.testKey })
    expect(missing.status).toBe(200)
    expect(missing.body).toEqual({ accounts: [], hasMore: false })
  })

  test('an externalId of another organization is not found by this one', async () => {
    const response = await app.call('GET', '/v1/accounts?externalId=paged-3', { key: org.testKey })
    expect(response.body.accounts).toEqual([])
  })

  test('reads one account by id', async () => {
    const response = await app.call('GET', `/v1/accounts/${mintedIds[0]}`, { key: pagedOrg.testKey })
    expect(response.status).toBe(200)
    expect(response.body).toMatchObject({ id: mintedIds[0], externalId: 'paged-0' })
  })

  test("another organization's account answers 404 exactly like a missing one", async () => {
    const foreign = await app.call('GET', `/v1/accounts/${mintedIds[0]}`, { key: org.testKey })
    const missing = await app.call('GET', '/v1/accounts/acct_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f', { key: org.testKey })
    expect(foreign.status).toBe(404)
    expect(missing.status).toBe(404)
    expect(foreign.body.error.code).toBe('not_found')
    const withoutRequestId = (body: { error: Record<string, unknown> }) => ({ ...body.error, requestId: undefined })
    expect(withoutRequestId(foreign.body)).toEqual(withoutRequestId(missing.body))
  })

  test("an attestation sent for another organization's account answers 404 and changes nothing", async () => {
    const response = await app.call('POST', `/v1/accounts/${mintedIds[0]}/kyc`, { key: org.testKey, body: { attestation: 'a.b.c' } })
    expect(response.status).toBe(404)
    expect(response.body.error.code).toBe('not_found')
    const account = await app.call('GET', `/v1/accounts/${mintedIds[0]}`, { key: pagedOrg.testKey })
    expect(account.body.kyc).toBeNull()
  })
})
