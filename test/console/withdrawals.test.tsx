import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { cleanup } from 'ink-testing-library'
import { queryRows } from '../../db/client.ts'
import { startOperatorFixture, type OperatorFixture } from '../operator/support.ts'
import { KEYS, renderConsole } from './support.tsx'

let op: OperatorFixture
beforeAll(async () => {
  op = await startOperatorFixture('Console Screen Org')
}, 60_000)
afterEach(() => cleanup())
afterAll(async () => {
  await op.close()
}, 30_000)

const short = (id: string) => id.slice(-6)

describe('the Withdrawals screen', () => {
  test('lists the queue with organization, account, amount, asset, network, destination, screening and age, and follows it by itself', async () => {
    const first = await op.pendingWithdrawal('1250')
    const view = renderConsole(op.baseUrl, op.token)
    const frame = await view.shows('1250')
    expect(frame).toContain('Organization  Account      Amount        Asset Net  Destination    Screen Age')
    const line = frame.split('\n').find((text) => text.includes('1250'))!
    expect(line).toContain('Console Scre…')
    expect(line).toContain(short(op.account))
    expect(line).toMatch(/USDC\s+sui\s+…a5a5a5a5a5a5a\s+pass\s+\d+[smhd]/)
    // A withdrawal created now appears without a key being pressed.
    await op.pendingWithdrawal('777')
    await view.shows('777 ')
    expect(view.frame()).toContain(first.id.slice(0, 3))
  }, 30_000)

  test('shows the detail with the quote, and approves with the operator name and a confirmation', async () => {
    const pending = await op.pendingWithdrawal('4321')
    const view = renderConsole(op.baseUrl, op.token)
    await view.shows('4321')
    // Newest first: the new withdrawal is selected at the top.
    await view.shows(`selected ${pending.id}`)
    view.press(KEYS.enter)
    await view.shows(`Withdrawal ${pending.id} pending_approval`)
    const detail = await view.shows(`Quote ${pending.quoteId} (consumed)`)
    expect(detail).toContain('amount        4321.000000 USDC')
    expect(detail).toContain(`total debited ${pending.totalDebited}`)
    view.press('a')
    await view.shows('Operator name:')
    view.press(KEYS.enter)
    await view.shows(`Approve 4321 USDC on sui`)
    expect(view.frame()).toContain('as Ada?')
    view.press('y')
    await view.shows(`Approved ${pending.id} as Ada: now approved`)
    await view.hides('4321 ')
    const through = await op.fx.call('GET', `/v1/withdrawals/${pending.id}`)
    expect(through.body.approval.approvedBy).toEqual({ type: 'operator', id: 'Ada' })
    const trail = await op.app.ops('GET', `/ops/v1/operator-actions?targetId=${pending.id}`)
    expect(trail.body.actions.map((action: any) => [action.operator, action.action, action.outcome])).toEqual([['Ada', 'withdrawal.approve', 'succeeded']])
    // The action was sent with an Idempotency-Key of its own, saved with its answer.
    const keys = await queryRows<{ key: string; path: string; state: string }>(
      op.app.kassa.runtime.db,
      sql`select key, path, state from idempotency_records where org_id like 'ops:%' and path = ${`/ops/v1/withdrawals/${pending.id}/approve`}`,
    )
    expect(keys).toHaveLength(1)
    expect(keys[0]!.key).toMatch(/^console-approve-/)
    expect(keys[0]!.state).toBe('completed')
  }, 30_000)

  test('rejects with a name and a reason; cancelling the confirmation changes nothing', async () => {
    const pending = await op.pendingWithdrawal('2468')
    const view = renderConsole(op.baseUrl, op.token)
    await view.shows(`selected ${pending.id}`)
    view.press('r')
    await view.shows('Operator name:')
    view.press(KEYS.enter)
    await view.shows('Reason:')
    view.press('beneficiary unknown')
    await view.shows('beneficiary unknown')
    view.press(KEYS.enter)
    await view.shows('reason "beneficiary unknown"?')
    view.press('n')
    await view.hides('reason "beneficiary unknown"?')
    expect((await op.fx.call('GET', `/v1/withdrawals/${pending.id}`)).body.state).toBe('pending_approval')

    view.press('r')
    await view.shows('Operator name:')
    view.press(KEYS.enter)
    await view.shows('Reason:')
    view.press('beneficiary unknown')
    await view.shows('beneficiary unknown')
    view.press(KEYS.enter)
    await view.shows('reason "beneficiary unknown"?')
    view.press('y')
    await view.shows(`Rejected ${pending.id} as Ada: now rejected`)
    const through = await op.fx.call('GET', `/v1/withdrawals/${pending.id}`)
    expect(through.body.state).toBe('rejected')
    expect(through.body.failureReason).toBe('beneficiary unknown')
    expect(through.body.rejectedBy).toEqual({ type: 'operator', id: 'Ada' })
  }, 30_000)

  test("shows the API's refusal in place and keeps running when the withdrawal changed meanwhile", async () => {
    const pending = await op.pendingWithdrawal('1357')
    const view = renderConsole(op.baseUrl, op.token, { refreshMs: 60_000 })
    await view.shows(`selected ${pending.id}`)
    view.press('a')
    await view.shows('Operator name:')
    view.press(KEYS.enter)
    await view.shows('as Ada?')
    // Another operator approves it first.
    expect((await op.app.ops('POST', `/ops/v1/withdrawals/${pending.id}/approve`, { operator: 'Grace' })).status).toBe(200)
    view.press('y')
    await view.shows(/approve wd_…\w+ refused: conflict: Withdrawal wd_\w+ is \w+/)
    await view.shows('last error: conflict')
    // Still answering keys.
    view.press('?')
    await view.shows('Help')
  }, 30_000)
})
