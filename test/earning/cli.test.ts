import { describe, expect, test } from 'bun:test'
import { planCall } from '../../server/cli.ts'

describe('the operator CLI for vaults and cycles', () => {
  test.each([
    [['vaults', 'list'], { method: 'GET', path: '/ops/v1/vaults' }],
    [
      ['vaults', 'create', 'core', '--name', 'Core USDC', '--min-subscription', '10', '--min-redemption', '1', '--payout', 'claimable', '--subscription-fee-bps', '25', '--daily-rate=0.0001'],
      { method: 'POST', path: '/ops/v1/vaults', body: { vaultId: 'core', asset: 'USDC', name: 'Core USDC', minSubscription: '10', minRedemption: '1', payoutMode: 'claimable', subscriptionFeeBps: 25, dailyRate: '0.0001' } },
    ],
    [['vaults', 'pause', 'core'], { method: 'POST', path: '/ops/v1/vaults/core/pause' }],
    [['vaults', 'unpause', 'core'], { method: 'POST', path: '/ops/v1/vaults/core/unpause' }],
    [['vaults', 'nav', 'core', '1.05', '--daily-rate', '0.0002'], { method: 'POST', path: '/ops/v1/vaults/core/nav', body: { price: '1.05', dailyRate: '0.0002' } }],
    [['vaults', 'cycles', 'core'], { method: 'GET', path: '/ops/v1/vaults/core/cycles' }],
    [['cycles', 'settle', 'vcy_1'], { method: 'POST', path: '/ops/v1/vault-cycles/vcy_1/settle' }],
    [['cycles', 'rollback', 'vcy_1'], { method: 'POST', path: '/ops/v1/vault-cycles/vcy_1/rollback' }],
    [['cycles', 'close', 'vcy/1'], { method: 'POST', path: '/ops/v1/vault-cycles/vcy%2F1/close' }],
  ] as const)('%p calls the operator API', (argv, call) => {
    expect(planCall([...argv])).toEqual(call as never)
  })

  test.each([
    [['vaults', 'create', 'core', '--name', 'Core']],
    [['vaults', 'create', 'core', '--name', 'Core', '--min-subscription', '1', '--min-redemption', '1', '--payout', 'later']],
    [['vaults', 'create', 'core', '--name', 'Core', '--min-subscription', '1', '--min-redemption', '1', '--platform-fee-bps', 'ten']],
    [['vaults', 'nav', 'core']],
    [['cycles', 'settle']],
    [['vaults', 'pause', 'a', 'b']],
  ] as const)('%p is a usage error', (argv) => {
    expect(() => planCall([...argv])).toThrow()
  })
})
