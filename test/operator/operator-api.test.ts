import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { KassaEvent } from '../../console/api.ts'
import { followEvents, type StreamState } from '../../console/event-stream.ts'
import { eventuallyPasses } from '../support/eventually.ts'
import { withdrawalFixture } from '../withdrawals/support.ts'
import { SUI_DESTINATION } from '../withdrawals/support.ts'
import { startOperatorFixture, type OperatorFixture } from './support.ts'

let op: OperatorFixture
beforeAll(async () => {
  op = await startOperatorFixture()
}, 60_000)
afterAll(async () => {
  await op.close()
})

async function actionsOn(targetId: string) {
  return queryRows<{ operator: string; action: string; outcome: string; error_code: string | null; token_fingerprint: string }>(
    op.app.kassa.runtime.db,
    sql`select operator, action, outcome, error_code, token_fingerprint from operator_actions where target_id = ${targetId} order by id`,
  )
}

async function actionEventsOn(targetId: string) {
  return queryRows<{ org_id: string; data: any }>(op.app.kassa.runtime.db, sql`select org_id, data from events where type = 'operator.action' and data->>'targetId' = ${targetId}`)
}

describe('the approval queue', () => {
  test('lists pending withdrawals of every organization, newest first, with the quote in the detail', async () => {
    const other = await withdrawalFixture(op.app, 'Second Queue Org')
    expect((await op.app.ops('PUT', `/ops/v1/orgs/${other.org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '100' })).status).toBe(200)
    const first = await op.pendingWithdrawal('700')
    const otherAccount = await other.mint('other')
    await other.fund(otherAccount, '1000')
    const otherEntry = await other.activeEntry(otherAccount, 'sui', SUI_DESTINATION)
    const second = await other.withdraw({ accountId: otherAccount, allowlistEntryId: otherEntry, quoteId: await other.quote(otherAccount, '150') })
    expect(second.status).toBe(201)

    const queue = await op.app.ops('GET', '/ops/v1/withdrawal-approvals')
    expect(queue.status).toBe(200)
    const ids = queue.body.withdrawals.map((item: { id: string }) => item.id)
    expect(ids.indexOf(second.body.id)).toBeLessThan(ids.indexOf(first.id))
    const item = queue.body.withdrawals.find((entry: { id: string }) => entry.id === first.id)
    expect(item).toMatchObject({ orgId: op.fx.org.id, orgName: 'Console Org', accountId: op.account, amount: '700.000000', asset: 'USDC', network: 'sui', destination: SUI_DESTINATION, screening: { outcome: 'pass', reason: null } })
    expect(item.ageSeconds).toBeGreaterThanOrEqual(0)

    const detail = await op.app.ops('GET', `/ops/v1/withdrawals/${first.id}`)
    expect(detail.status).toBe(200)
    expect(detail.body.quote).toMatchObject({ id: first.quoteId, state: 'consumed', amount: '700.000000', totalDebited: first.totalDebited })
    expect(detail.body.withdrawal.state).toBe('pending_approval')
    expect((await op.app.ops('GET', '/ops/v1/withdrawals/wd_missing')).status).toBe(404)
  })

  test('needs the operator token', async () => {
    const refused = await op.app.call('GET', '/ops/v1/withdrawal-approvals', { key: op.fx.org.testKey })
    expect(refused.status).toBe(401)
  })
})

describe('operator actions', () => {
  test('an approval names the operator, leaves the queue, is recorded with the token fingerprint and emitted as an event', async () => {
    const pending = await op.pendingWithdrawal()
    const key = `approve-${pending.id}`
    const headers = { authorization: `Bearer ${op.token}`, 'idempotency-key': key }
    const approved = await op.app.call('POST', `/ops/v1/withdrawals/${pending.id}/approve`, { body: { operator: 'Ada Lovelace' }, headers })
    expect(approved.status).toBe(200)
    expect(approved.body.approval.approvedBy).toEqual({ type: 'operator', id: 'Ada Lovelace' })
    const queue = await op.app.ops('GET', '/ops/v1/withdrawal-approvals')
    expect(queue.body.withdrawals.map((item: { id: string }) => item.id)).not.toContain(pending.id)

    // The same key answers the same again and records nothing more.
    const replay = await op.app.call('POST', `/ops/v1/withdrawals/${pending.id}/approve`, { body: { operator: 'Ada Lovelace' }, headers })
    expect(replay.status).toBe(200)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.body.id).toBe(pending.id)

    const fingerprint = new Bun.CryptoHasher('sha256').update(op.token).digest('hex').slice(0, 16)
    expect(await actionsOn(pending.id)).toEqual([{ operator: 'Ada Lovelace', action: 'withdrawal.approve', outcome: 'succeeded', error_code: null, token_fingerprint: fingerprint }])
    const events = await actionEventsOn(pending.id)
    expect(events).toHaveLength(1)
    expect(events[0]!.org_id).toBe(op.fx.org.id)
    expect(events[0]!.data).toMatchObject({ operator: 'Ada Lovelace', action: 'withdrawal.approve', outcome: 'succeeded', tokenFingerprint: fingerprint })

    const trail = await op.app.ops('GET', `/ops/v1/operator-actions?targetId=${pending.id}`)
    expect(trail.body.actions.map((action: { action: string }) => action.action)).toEqual(['withdrawal.approve'])
  })

  test('a refused approval changes nothing and is recorded as refused, without an event', async () => {
    const pending = await op.pendingWithdrawal()
    expect((await op.app.ops('POST', `/ops/v1/withdrawals/${pending.id}/reject`, { operator: 'Grace', reason: 'unknown beneficiary' })).status).toBe(200)
    const again = await op.app.ops('POST', `/ops/v1/withdrawals/${pending.id}/approve`, { operator: 'Ada' })
    expect(again.status).toBe(409)
    expect(again.body.error.code).toBe('conflict')
    expect((await op.fx.call('GET', `/v1/withdrawals/${pending.id}`)).body.state).toBe('rejected')
    expect((await actionsOn(pending.id)).map((row) => [row.action, row.outcome, row.error_code])).toEqual([
      ['withdrawal.reject', 'succeeded', null],
      ['withdrawal.approve', 'refused', 'conflict'],
    ])
    expect((await actionEventsOn(pending.id)).map((event) => event.data.action)).toEqual(['withdrawal.reject'])
  })

  test('a rejection needs an operator and a reason; refused input records nothing', async () => {
    const pending = await op.pendingWithdrawal()
    const noReason = await op.app.ops('POST', `/ops/v1/withdrawals/${pending.id}/reject`, { operator: 'Grace' })
    expect(noReason.status).toBe(400)
    expect(noReason.body.error.field).toContain('reason')
    const noName = await op.app.ops('POST', `/ops/v1/withdrawals/${pending.id}/approve`, { operator: '' })
    expect(noName.status).toBe(400)
    expect(await actionsOn(pending.id)).toEqual([])
    expect((await op.fx.call('GET', `/v1/withdrawals/${pending.id}`)).body.state).toBe('pending_approval')
  })

  test('the organization-scoped operator approval is recorded too', async () => {
    const pending = await op.pendingWithdrawal()
    expect((await op.app.ops('POST', `/ops/v1/orgs/${op.fx.org.id}/withdrawals/${pending.id}/approve`, { operator: 'Linus' })).status).toBe(200)
    expect((await actionsOn(pending.id)).map((row) => [row.operator, row.outcome])).toEqual([['Linus', 'succeeded']])
  })
})

describe('the event stream', () => {
  function follow(options: { types?: string; orgId?: string; lastEventId?: string; backlog?: number }) {
    const received: KassaEvent[] = []
    const states: StreamState[] = []
    const stream = followEvents({
      baseUrl: op.baseUrl,
      headers: { authorization: `Bearer ${op.token}` },
      types: options.types ?? '',
      orgId: options.orgId ?? '',
      lastEventId: options.lastEventId,
      backlog: options.backlog ?? 0,
      onEvents: (events) => received.push(...events),
      onState: (state) => states.push(state),
    })
    return { received, states, stream }
  }

  test('sends new events live, filtered by namespace and organization', async () => {
    const tail = follow({ types: 'treasury.*', orgId: op.fx.org.id })
    await eventuallyPasses(() => expect(tail.states).toContain('live'))
    const pending = await op.pendingWithdrawal()
    await eventuallyPasses(() => expect(tail.received.map((event) => event.type)).toContain('treasury.withdrawal.pending_approval'))
    expect(tail.received.every((event) => event.type.startsWith('treasury.') && event.orgId === op.fx.org.id)).toBe(true)
    expect(tail.received.find((event) => event.type === 'treasury.withdrawal.pending_approval')!.data.id).toBe(pending.id)
    tail.stream.stop()
  })

  test('resumes after a dropped connection with the events that followed, none lost or repeated', async () => {
    const first = follow({ types: 'treasury.withdrawal.pending_approval' })
    await eventuallyPasses(() => expect(first.states).toContain('live'))
    const before = await op.pendingWithdrawal()
    await eventuallyPasses(() => expect(first.received.map((event) => event.data.id)).toContain(before.id))
    const cursor = first.stream.stop()
    // Written while no one listens.
    const missed = [await op.pendingWithdrawal(), await op.pendingWithdrawal()]
    const resumed = follow({ types: 'treasury.withdrawal.pending_approval', lastEventId: cursor })
    const after = await op.pendingWithdrawal()
    await eventuallyPasses(() => expect(resumed.received.map((event) => event.data.id)).toEqual([...missed, after].map((w) => w.id)))
    resumed.stream.stop()
  })

  test('starts with a backlog when asked, and refuses an unknown cursor or filter', async () => {
    const tail = follow({ types: 'treasury.withdrawal.pending_approval', backlog: 2 })
    await eventuallyPasses(() => expect(tail.received).toHaveLength(2))
    tail.stream.stop()
    const unknown = await fetch(`${op.baseUrl}/ops/v1/events/stream`, { headers: { authorization: `Bearer ${op.token}`, 'last-event-id': 'evt_nope' } })
    expect(unknown.status).toBe(400)
    expect(((await unknown.json()) as any).error.field).toBe('Last-Event-ID')
    const badFilter = await fetch(`${op.baseUrl}/ops/v1/events/stream?types=Treasury*`, { headers: { authorization: `Bearer ${op.token}` } })
    expect(badFilter.status).toBe(400)
    const noToken = await fetch(`${op.baseUrl}/ops/v1/events/stream`)
    expect(noToken.status).toBe(401)
  })
})
