import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { createVault, openCycleOf } from '../earning/support.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'

let app: TestApp
let fx: LedgerFixture
let alice: string
let fingerprint: string

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app, 'Audited Vaults')
  alice = await fx.mint('alice')
  await fx.fund(alice, '1000')
  await createVault(app, 'audited')
  await createVault(app, 'refusing')
  fingerprint = new Bun.CryptoHasher('sha256').update(app.kassa.runtime.operatorToken).digest('hex').slice(0, 16)
}, 60_000)
afterAll(async () => {
  await app.close()
}, 30_000)

/** An operator POST with an Idempotency-Key, as the console sends it. */
function keyed(path: string, body: unknown, key: string) {
  return app.call('POST', path, { body, headers: { authorization: `Bearer ${app.kassa.runtime.operatorToken}`, 'idempotency-key': key } })
}

async function actionsOn(targetId: string) {
  return queryRows<{ operator: string; action: string; outcome: string; error_code: string | null; token_fingerprint: string; org_id: string | null }>(
    app.kassa.runtime.db,
    sql`select operator, action, outcome, error_code, token_fingerprint, org_id from operator_actions where target_id = ${targetId} order by id`,
  )
}

async function actionEventsOn(targetId: string) {
  await app.kassa.runtime.ledger.drain()
  return queryRows<{ org_id: string | null; data: any }>(app.kassa.runtime.db, sql`select org_id, data from events where type = 'operator.action' and data->>'targetId' = ${targetId} order by seq`)
}

async function trailOf(targetId: string) {
  const trail = await app.ops('GET', `/ops/v1/operator-actions?targetId=${targetId}`)
  expect(trail.status).toBe(200)
  return trail.body.actions.map((action: any) => [action.operator, action.action, action.outcome, action.tokenFingerprint]).reverse()
}

describe('vault actions in the operator audit trail', () => {
  test('pause and unpause are each recorded once with who, what and the token, and emitted as operator.action', async () => {
    const paused = await keyed('/ops/v1/vaults/audited/pause', { operator: 'Ada Lovelace' }, 'pause-audited')
    expect(paused.status).toBe(200)
    expect(paused.body.state).toBe('paused')
    const replay = await keyed('/ops/v1/vaults/audited/pause', { operator: 'Ada Lovelace' }, 'pause-audited')
    expect(replay.status).toBe(200)
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    const unpaused = await keyed('/ops/v1/vaults/audited/unpause', { operator: 'Grace Hopper' }, 'unpause-audited')
    expect(unpaused.status).toBe(200)
    expect(unpaused.body.state).toBe('active')

    expect(await trailOf('audited')).toEqual([
      ['Ada Lovelace', 'vault.pause', 'succeeded', fingerprint],
      ['Grace Hopper', 'vault.unpause', 'succeeded', fingerprint],
    ])
    expect((await actionsOn('audited')).map((row) => row.org_id)).toEqual([null, null])
    const events = await actionEventsOn('audited')
    expect(events.map((event) => [event.org_id, event.data.operator, event.data.action, event.data.outcome, event.data.tokenFingerprint])).toEqual([
      [null, 'Ada Lovelace', 'vault.pause', 'succeeded', fingerprint],
      [null, 'Grace Hopper', 'vault.unpause', 'succeeded', fingerprint],
    ])
  })

  test('without a body the operator is recorded as "operator"; a bad name is 400 and records nothing', async () => {
    const bad = await app.ops('POST', '/ops/v1/vaults/refusing/pause', { operator: '' })
    expect(bad.status).toBe(400)
    expect((await app.ops('GET', '/ops/v1/vaults')).body.vaults.find((vault: any) => vault.vaultId === 'refusing').state).toBe('active')
    expect(await actionsOn('refusing')).toEqual([])
    expect((await app.ops('POST', '/ops/v1/vaults/refusing/pause')).status).toBe(200)
    expect((await app.ops('POST', '/ops/v1/vaults/refusing/unpause')).status).toBe(200)
    expect((await actionsOn('refusing')).map((row) => [row.operator, row.action, row.outcome])).toEqual([
      ['operator', 'vault.pause', 'succeeded'],
      ['operator', 'vault.unpause', 'succeeded'],
    ])
  })
})

describe('cycle actions in the operator audit trail', () => {
  test('close and settle of a cycle with an intent are each recorded once, in the commit of their change', async () => {
    const cycle = await openCycleOf(app, 'audited', 'deposit')
    const subscribed = await fx.call('POST', '/v1/subscriptions', { accountId: alice, vaultId: 'audited', amount: '10' })
    expect(subscribed.status).toBe(201)
    const closed = await keyed(`/ops/v1/vault-cycles/${cycle.cycleId}/close`, { operator: 'Ada' }, `close-${cycle.cycleId}`)
    expect(closed.status).toBe(200)
    expect(closed.body.state).toBe('closed')
    expect((await keyed(`/ops/v1/vault-cycles/${cycle.cycleId}/close`, { operator: 'Ada' }, `close-${cycle.cycleId}`)).headers.get('idempotent-replayed')).toBe('true')
    const settled = await keyed(`/ops/v1/vault-cycles/${cycle.cycleId}/settle`, { operator: 'Grace' }, `settle-${cycle.cycleId}`)
    expect(settled.status).toBe(200)
    expect(settled.body.state).toBe('settled')
    expect((await keyed(`/ops/v1/vault-cycles/${cycle.cycleId}/settle`, { operator: 'Grace' }, `settle-${cycle.cycleId}`)).headers.get('idempotent-replayed')).toBe('true')

    expect(await trailOf(cycle.cycleId)).toEqual([
      ['Ada', 'vault_cycle.close', 'succeeded', fingerprint],
      ['Grace', 'vault_cycle.settle', 'succeeded', fingerprint],
    ])
    const events = await actionEventsOn(cycle.cycleId)
    expect(events.map((event) => [event.org_id, event.data.operator, event.data.action, event.data.tokenFingerprint])).toEqual([
      [null, 'Ada', 'vault_cycle.close', fingerprint],
      [null, 'Grace', 'vault_cycle.settle', fingerprint],
    ])
    // The settlement's event and the action's event committed together: the same transaction.
    const [together] = await queryRows<{ same: boolean }>(
      app.kassa.runtime.db,
      sql`select (select txid from events where type = 'vault.cycle.settled' and data->>'cycleId' = ${cycle.cycleId}) = (select txid from events where type = 'operator.action' and data->>'targetId' = ${cycle.cycleId} and data->>'action' = 'vault_cycle.settle') as same`,
    )
    expect(together!.same).toBe(true)
  })

  test('a rollback is recorded once; settling the rolled-back cycle is refused, recorded as refused, without an event', async () => {
    const cycle = await openCycleOf(app, 'audited', 'deposit')
    expect((await fx.call('POST', '/v1/subscriptions', { accountId: alice, vaultId: 'audited', amount: '5' })).status).toBe(201)
    const rolled = await keyed(`/ops/v1/vault-cycles/${cycle.cycleId}/rollback`, { operator: 'Linus' }, `rollback-${cycle.cycleId}`)
    expect(rolled.status).toBe(200)
    expect(rolled.body.state).toBe('rolled_back')
    expect((await keyed(`/ops/v1/vault-cycles/${cycle.cycleId}/rollback`, { operator: 'Linus' }, `rollback-${cycle.cycleId}`)).headers.get('idempotent-replayed')).toBe('true')

    const refused = await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`, { operator: 'Ada' })
    expect(refused.status).toBe(409)
    expect(refused.body.error.code).toBe('conflict')
    expect((await app.ops('GET', '/ops/v1/vaults/audited/cycles')).body.cycles.find((row: any) => row.cycleId === cycle.cycleId).state).toBe('rolled_back')

    expect((await actionsOn(cycle.cycleId)).map((row) => [row.operator, row.action, row.outcome, row.error_code, row.token_fingerprint])).toEqual([
      ['Linus', 'vault_cycle.rollback', 'succeeded', null, fingerprint],
      ['Ada', 'vault_cycle.settle', 'refused', 'conflict', fingerprint],
    ])
    expect((await actionEventsOn(cycle.cycleId)).map((event) => [event.data.operator, event.data.action])).toEqual([['Linus', 'vault_cycle.rollback']])
  })

  test('a repeat that changes nothing is recorded as such, with its event', async () => {
    const cycle = await openCycleOf(app, 'refusing', 'redeem')
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/close`, { operator: 'Ada' })).status).toBe(200)
    expect((await app.ops('POST', `/ops/v1/vault-cycles/${cycle.cycleId}/close`, { operator: 'Ada' })).status).toBe(200)
    const trail = await app.ops('GET', `/ops/v1/operator-actions?targetId=${cycle.cycleId}`)
    expect(trail.body.actions.map((action: any) => action.detail).reverse()).toEqual([{}, { changed: false }])
    expect(await actionEventsOn(cycle.cycleId)).toHaveLength(2)
  })
})
