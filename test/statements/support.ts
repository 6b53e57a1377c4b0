import { expect } from 'bun:test'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import type { TestApp } from '../support/app.ts'
import type { SignedStatement } from '../../server/modules/statements/document.ts'

/** A wall clock the test moves by hand (the organization's clock is it plus the sandbox offset). */
export class ManualWallClock {
  constructor(public ms: number) {}
  readonly read = () => this.ms
}

export interface StatementsFixture extends LedgerFixture {
  /** Moves the organization's clock to exactly `iso` (forward only) by moving the wall clock. */
  at(iso: string): void
  /** Moves the organization's clock ahead through the sandbox clock API. */
  advance(seconds: number): Promise<void>
  transfer(from: string, to: string, amount: string): Promise<void>
  statements(accountId: string, query?: string): Promise<SignedStatement[]>
  seal(): Promise<Array<{ orgId: string; businessDate: string; statements: number }>>
}

export async function statementsFixture(app: TestApp, wall: ManualWallClock, name: string): Promise<StatementsFixture> {
  const fx = await ledgerFixture(app, name)
  const clock = app.kassa.runtime.clock
  return {
    ...fx,
    at(iso) {
      const target = Date.parse(iso)
      const delta = target - clock.nowMs(fx.org.id)
      if (delta < 0) throw new Error(`the clock only moves forward (asked for ${iso}, it is ${new Date(clock.nowMs(fx.org.id)).toISOString()})`)
      wall.ms += delta
    },
    async advance(seconds) {
      const response = await fx.call('POST', '/v1/sandbox/clock/advance', { seconds })
      expect(response.status).toBe(200)
    },
    async transfer(from, to, amount) {
      const response = await fx.call('POST', '/v1/transfers', { sourceAccountId: from, destinationAccountId: to, asset: 'USDC', amount })
      expect(response.status).toBe(201)
    },
    async statements(accountId, query = '') {
      const response = await fx.call('GET', `/v1/accounts/${accountId}/statements${query}`)
      expect(response.status).toBe(200)
      return response.body.statements as SignedStatement[]
    },
    async seal() {
      const sealed = await app.kassa.statements.sealer.runOnce()
      return sealed.filter((entry) => entry.orgId === fx.org.id)
    },
  }
}
