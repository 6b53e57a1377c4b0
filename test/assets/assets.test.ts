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

describe('GET /v1/assets', () => {
  test('is public: without a key it lists USDC on Sui and USDT on Tron with 6 decimals', async () => {
    const response = await app.call('GET', '/v1/assets')
    expect(response.status).toBe(200)
    const summary = response.body.assets.map((asset: { asset: string; network: string; decimals: number }) => ({
      asset: asset.asset,
      network: asset.network,
      decimals: asset.decimals,
    }))
    expect(summary).toEqual([
      { asset: 'USDC', network: 'sui', decimals: 6 },
      { asset: 'USDT', network: 'tron', decimals: 6 },
    ])
  })

  test('answers the same to a publishable key', async () => {
    const anonymous = await app.call('GET', '/v1/assets')
    const withKey = await app.call('GET', '/v1/assets', { key: org.publishableKey })
    expect(withKey.status).toBe(200)
    expect(withKey.body).toEqual(anonymous.body)
  })

  test('a key that is sent is still checked', async () => {
    const response = await app.call('GET', '/v1/assets', { key: 'svc_test_notarealkeynotarealkey12' })
    expect(response.status).toBe(401)
    expect(response.body.error.code).toBe('authentication_error')
  })
})
