import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
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

describe('accounts', () => {
  test('minting an existing externalId returns the same account, never a second one', async () => {
    const first = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'user-1' } })
    expect(first.status).toBe(201)
    expect(first.body.id).toMatch(/^acct_[0-9a-f]{32}$/)
    const second = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'user-1' } })
    expect(second.status).toBe(200)
    expect(second.body.id).toBe(first.body.id)
    const list = await app.call('GET', '/v1/accounts?externalId=user-1', { key: org.testKey })
    expect(list.body.accounts).toHaveLength(1)
  })
})
