import { afterAll, describe, expect, test } from 'bun:test'
import { ConfigError, loadConfig } from '../../server/config.ts'
import { makeCertificate } from './receivers.ts'

const production = { SERVICE_ENV: 'production', DATABASE_URL: 'postgres://kassa@db.internal:5432/kassa', OPERATOR_TOKEN: 'op-token-for-webhook-config-tests-0123456789', DEPOSIT_KEY_SEED: 'a1'.repeat(32) }
const certificate = makeCertificate()
afterAll(() => certificate.remove())

function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env)
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError)
    return (error as Error).message
  }
  throw new Error('loadConfig accepted the environment')
}

describe('webhook settings', () => {
  test('sandbox reads the test-only CA file and the delivery switch', () => {
    const config = loadConfig({ WEBHOOK_CA_FILE: certificate.certFile, ALLOW_LOOPBACK_WEBHOOKS: 'true', WEBHOOK_DELIVERY: 'false' })
    expect(config).toMatchObject({ webhookCaFile: certificate.certFile, allowLoopbackWebhooks: true, webhookDelivery: false })
    expect(loadConfig({})).toMatchObject({ webhookCaFile: undefined, allowLoopbackWebhooks: false, webhookDelivery: true })
  })

  test('the delivery worker runs in a process of its own by default on Postgres, in the server on the embedded database', () => {
    const url = { DATABASE_URL: 'postgres://kassa@127.0.0.1:5432/kassa' }
    expect(loadConfig(url).webhookDeliveryProcess).toBe(true)
    expect(loadConfig({ ...url, WEBHOOK_DELIVERY_PROCESS: 'false' }).webhookDeliveryProcess).toBe(false)
    expect(loadConfig({}).webhookDeliveryProcess).toBe(false)
    expect(loadConfig({ WEBHOOK_DELIVERY_PROCESS: 'false' }).webhookDeliveryProcess).toBe(false)
    expect(refusal({ WEBHOOK_DELIVERY_PROCESS: 'true' })).toMatch(/WEBHOOK_DELIVERY_PROCESS=true needs DATABASE_URL/)
    expect(refusal({ ...url, WEBHOOK_DELIVERY_PROCESS: 'sometimes' })).toContain('WEBHOOK_DELIVERY_PROCESS')
  })

  test('refuses a CA file that does not exist, naming the variable', () => {
    expect(refusal({ WEBHOOK_CA_FILE: '/nonexistent/ca.pem' })).toContain('WEBHOOK_CA_FILE')
  })

  test('production refuses to start with the test-only CA file or loopback receivers', () => {
    expect(refusal({ ...production, WEBHOOK_CA_FILE: certificate.certFile })).toMatch(/production refuses to start.*WEBHOOK_CA_FILE/)
    expect(refusal({ ...production, ALLOW_LOOPBACK_WEBHOOKS: 'true' })).toContain('ALLOW_LOOPBACK_WEBHOOKS')
    expect(loadConfig(production).webhookCaFile).toBeUndefined()
  })
})
