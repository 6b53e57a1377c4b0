import { describe, expect, test } from 'bun:test'
import { ConfigError, loadConfig } from '../../server/config.ts'
import { BlocklistRule, Screening, type ScreeningRule } from '../../server/modules/screening/screening.ts'

const SUI = `0x${'ab'.repeat(32)}`
const TRON = 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t'
const subject = (network: 'sui' | 'tron', address: string) => ({ orgId: 'org_x', accountId: 'acct_x', network, address })

describe('SCREENING_BLOCKLIST', () => {
  test('is read comma-separated, in canonical form', () => {
    expect(loadConfig({ SCREENING_BLOCKLIST: ` ${SUI.toUpperCase().replace('0X', '0x')} , ${TRON},` }).screeningBlocklist).toEqual([SUI, TRON])
    expect(loadConfig({}).screeningBlocklist).toEqual([])
  })

  test('refuses to start with an entry that is not a valid Sui or Tron address', () => {
    for (const bad of ['0x2', 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6u', 'not-an-address']) {
      expect(() => loadConfig({ SCREENING_BLOCKLIST: `${SUI},${bad}` })).toThrow(ConfigError)
      expect(() => loadConfig({ SCREENING_BLOCKLIST: bad })).toThrow('SCREENING_BLOCKLIST')
    }
  })
})

describe('screening rules', () => {
  test('the blocklist rejects exactly its addresses', async () => {
    const rule = new BlocklistRule([SUI])
    expect(await rule.check(subject('sui', SUI))).toMatchObject({ outcome: 'reject' })
    expect(await rule.check(subject('tron', TRON))).toEqual({ outcome: 'pass' })
  })

  test('every rule must pass: the first rejection answers screening_rejected naming the field', async () => {
    const calls: string[] = []
    const partner: ScreeningRule = {
      name: 'partner',
      async check(candidate) {
        calls.push(candidate.address)
        return candidate.address === TRON ? { outcome: 'reject', reason: 'sanctioned' } : { outcome: 'pass' }
      },
    }
    const screening = new Screening([new BlocklistRule([SUI]), partner])
    await expect(screening.screen(subject('sui', SUI), 'address')).rejects.toMatchObject({ code: 'screening_rejected', field: 'address' })
    // The blocklist already refused it: the partner was not asked.
    expect(calls).toEqual([])
    await expect(screening.screen(subject('tron', TRON), 'allowlistEntryId')).rejects.toMatchObject({ code: 'screening_rejected', field: 'allowlistEntryId', message: expect.stringContaining('sanctioned') })
    await expect(screening.screen(subject('sui', `0x${'cd'.repeat(32)}`), 'address')).resolves.toBeUndefined()
  })
})
