import { expect } from 'bun:test'
import { startTestApp, type TestApp } from '../support/app.ts'
import { SUI_DESTINATION, withdrawalFixture, type WithdrawalFixture } from '../withdrawals/support.ts'

/** A test app listening on a loopback port (the console is an HTTP client), with one organization ready to withdraw. */
export interface OperatorFixture {
  app: TestApp
  fx: WithdrawalFixture
  baseUrl: string
  token: string
  account: string
  entry: string
  /** Creates a withdrawal above the approval threshold: it waits in the queue. */
  pendingWithdrawal(amount?: string): Promise<any>
  close(): Promise<void>
}

export async function startOperatorFixture(name = 'Console Org'): Promise<OperatorFixture> {
  const app = await startTestApp()
  const fx = await withdrawalFixture(app, name)
  expect((await app.ops('PUT', `/ops/v1/orgs/${fx.org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '500' })).status).toBe(200)
  const account = await fx.mint('console-withdrawer')
  await fx.fund(account, '100000')
  const entry = await fx.activeEntry(account, 'sui', SUI_DESTINATION)
  app.kassa.app.listen({ port: 0, hostname: '127.0.0.1' })
  const server = app.kassa.app.server!
  return {
    app,
    fx,
    baseUrl: `http://127.0.0.1:${server.port}`,
    token: app.kassa.runtime.operatorToken,
    account,
    entry,
    async pendingWithdrawal(amount = '600') {
      const created = await fx.withdraw({ accountId: account, allowlistEntryId: entry, quoteId: await fx.quote(account, amount) })
      expect(created.status).toBe(201)
      expect(created.body.state).toBe('pending_approval')
      return created.body
    },
    close: () => app.close(),
  }
}
