import { describe, expect, test } from 'bun:test'
import { ConfigError, loadConfig } from '../../server/config.ts'

const production = {
  SERVICE_ENV: 'production',
  DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres',
  OPERATOR_TOKEN: 'production-operator-token-0123456789abcdef',
  DEPOSIT_KEY_SEED: 'a1'.repeat(32),
}

describe('the earning venue setting', () => {
  test('runs the sandbox venue in sandbox and earning off in production by default', () => {
    expect(loadConfig({}).vaultVenue).toBe('sandbox')
    expect(loadConfig(production).vaultVenue).toBe('off')
  })

  test('refuses to start production earning on the sandbox venue, saying a venue adapter is needed', () => {
    let error: unknown
    try {
      loadConfig({ ...production, VAULT_VENUE: 'sandbox' })
    } catch (caught) {
      error = caught
    }
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as Error).message).toContain('VAULT_VENUE')
    expect((error as Error).message).toContain('venue adapter')
  })

  test('refuses the test-only crash switch in production and an unknown venue anywhere', () => {
    expect(() => loadConfig({ ...production, KASSA_TEST_CRASH_POINT: 'cycle-settlement' })).toThrow('KASSA_TEST_CRASH_POINT')
    expect(() => loadConfig({ VAULT_VENUE: 'mainnet' })).toThrow('VAULT_VENUE')
  })
})
