import { describe, expect, test } from 'bun:test'
import { ConfigError, loadConfig } from '../../server/config.ts'

describe('statement settings', () => {
  test('seal 60 s after a cut-off, looking every 60 s, unless configured', () => {
    expect(loadConfig({})).toMatchObject({ statementSettleSeconds: 60, statementSealIntervalSeconds: 60 })
    expect(loadConfig({ STATEMENT_SETTLE_SECONDS: '0', STATEMENT_SEAL_INTERVAL_SECONDS: '300' })).toMatchObject({ statementSettleSeconds: 0, statementSealIntervalSeconds: 300 })
  })

  test.each([
    ['STATEMENT_SETTLE_SECONDS', 'soon', /STATEMENT_SETTLE_SECONDS must be a whole number/],
    ['STATEMENT_SETTLE_SECONDS', '3601', /STATEMENT_SETTLE_SECONDS must be between 0 and 3600/],
    ['STATEMENT_SEAL_INTERVAL_SECONDS', '-1', /STATEMENT_SEAL_INTERVAL_SECONDS must be a whole number/],
  ])('%s=%s is refused with a clear error', (name, value, message) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError)
    expect(() => loadConfig({ [name]: value })).toThrow(message)
  })
})
