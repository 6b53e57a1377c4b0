import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { restartOnSameDatabase, startTestApp, type TestApp } from '../support/app.ts'
import { expectRefusedWithoutChange, expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { createVault, eventsOf } from './support.ts'

let app: TestApp

// Each test drives several passes and clock moves through the app; the machine is shared.
setDefaultTimeout(30_000)

beforeAll(async () => {
  app = await startTestApp()
  await createVault(app, 'save', { minSubscription: '1' })
  await createVault(app, 'other', { minSubscription: '1' })
}, 60_000)
afterAll(async () => {
  await app.close()
})

const policies = () => app.kassa.earning!.savePolicies
const nextDay = (fx: LedgerFixture) => fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 86_400 })
const putPolicy = (fx: LedgerFixture, accountId: string, body: Record<string, unknown>) => fx.call('PUT', `/v1/accounts/${accountId}/save-policy`, body)

async function runsOf(accountId: string): Promise<Array<{ day: string; outcome: string; reason: string | null; amount: string | null; intent_id: string | null }>> {
  return queryRows(app.kassa.runtime.db, sql`select day::text as day, outcome, reason, amount::text as amount, intent_id from save_policy_runs where account_id = ${accountId} order by day`)
}

async function intentsOf(accountId: string): Promise<Array<{ id: string; amount: string; vault_id: string }>> {
  return queryRows(app.kassa.runtime.db, sql`select id, amount::text as amount, vault_id from vault_intents where account_id = ${accountId} and kind = 'deposit' order by id`)
}

async function orgDay(fx: LedgerFixture): Promise<string> {
  return (await fx.call('GET', '/v1/sandbox/clock')).body.now.slice(0, 10)
}

describe('the save policy resource', () => {
  test('PUT sets the policy and GET reads it back; a second PUT replaces it', async () => {
    const fx = await ledgerFixture(app, 'Policy Org A')
    const alice = await fx.mint('alice')
    const put = await putPolicy(fx, alice, { vaultId: 'save', buffer: '250', enabled: true })
    expect(put.status).toBe(200)
    expect(put.body).toMatchObject({ accountId: alice, vaultId: 'save', asset: 'USDC', buffer: '250.000000', enabled: true, recentRuns: [] })
    const replaced = await putPolicy(fx, alice, { vaultId: 'other', buffer: '0', enabled: false })
    expect(replaced.body).toMatchObject({ vaultId: 'other', buffer: '0.000000', enabled: false, createdAt: put.body.createdAt })
    expect((await fx.call('GET', `/v1/accounts/${alice}/save-policy`)).body).toEqual(replaced.body)
  })

  test('refuses bad input naming the field and writes nothing', async () => {
    const fx = await ledgerFixture(app, 'Policy Org B')
    const alice = await fx.mint('alice')
    const count = async () => (await queryRows<{ n: string }>(app.kassa.runtime.db, sql`select count(*)::text as n from save_policies`))[0]!.n
    const before = await count()
    const badBuffer = await putPolicy(fx, alice, { vaultId: 'save', buffer: '1.0000001', enabled: true })
    expect([badBuffer.status, badBuffer.body.error.code, badBuffer.body.error.field]).toEqual([400, 'invalid_request', 'buffer'])
    const negative = await putPolicy(fx, alice, { vaultId: 'save', buffer: '-5', enabled: true })
    expect([negative.status, negative.body.error.field]).toEqual([400, 'buffer'])
    const noVault = await putPolicy(fx, alice, { vaultId: 'nope', buffer: '1', enabled: true })
    expect([noVault.status, noVault.body.error.code, noVault.body.error.field]).toEqual([404, 'not_found', 'vaultId'])
    expect((await putPolicy(fx, 'acct_unknown', { vaultId: 'save', buffer: '1', enabled: true })).status).toBe(404)
    expect((await fx.call('GET', `/v1/accounts/${alice}/save-policy`)).status).toBe(404)
    // Another organization's account is not found either way.
    const other = await ledgerFixture(app, 'Policy Org B2')
    expect((await putPolicy(other, alice, { vaultId: 'save', buffer: '1', enabled: true })).status).toBe(404)
    expect(await count()).toBe(before)
  })
})

describe('the daily run', () => {
  test('subscribes what is above the buffer once a day, as an ordinary subscription marked as made by the policy', async () => {
    const fx = await ledgerFixture(app, 'Policy Org C')
    const alice = await fx.mint('alice')
    await fx.fund(alice, '1000')
    await putPolicy(fx, alice, { vaultId: 'save', buffer: '250', enabled: true })
    const day1 = await orgDay(fx)
    await policies().runOnce()
    const [intent] = await intentsOf(alice)
    expect(intent).toMatchObject({ amount: '750000000', vault_id: 'save' })
    expect(await fx.balance(alice)).toMatchObject({ available: '250.000000', inFlight: '750.000000' })
    const [confirmed] = (await eventsOf(app, 'transaction.deposit.confirmed')).filter((event) => event.data.intentId === intent!.id)
    expect(confirmed!.data).toMatchObject({ accountId: alice, vaultId: 'save', amount: '750.000000', madeBy: 'save_policy' })
    expect(await runsOf(alice)).toEqual([{ day: day1, outcome: 'subscribed', reason: null, amount: '750000000', intent_id: intent!.id }])
    // The same day again, even with new money: nothing more.
    await fx.fund(alice, '100')
    await policies().runOnce()
    expect(await intentsOf(alice)).toHaveLength(1)
    expect(await runsOf(alice)).toHaveLength(1)
    // The next day on the organization's clock: the new excess goes in.
    await nextDay(fx)
    await policies().runOnce()
    const intents = await intentsOf(alice)
    expect(intents.map((row) => row.amount)).toEqual(['750000000', '100000000'])
    expect(await fx.balance(alice)).toMatchObject({ available: '250.000000', inFlight: '850.000000' })
    const view = (await fx.call('GET', `/v1/accounts/${alice}/save-policy`)).body
    expect(view.recentRuns.map((run: any) => [run.outcome, run.amount])).toEqual([
      ['subscribed', '100.000000'],
      ['subscribed', '750.000000'],
    ])
    await expectVerified(app)
  })

  test('a day with nothing above the buffer subscribes nothing and records it; a disabled policy does not run', async () => {
    const fx = await ledgerFixture(app, 'Policy Org D')
    const alice = await fx.mint('alice')
    const bob = await fx.mint('bob')
    await fx.fund(alice, '100')
    await fx.fund(bob, '100')
    await putPolicy(fx, alice, { vaultId: 'save', buffer: '100', enabled: true })
    await putPolicy(fx, bob, { vaultId: 'save', buffer: '0', enabled: false })
    await policies().runOnce()
    expect((await runsOf(alice)).map((run) => run.outcome)).toEqual(['nothing_to_invest'])
    expect(await runsOf(bob)).toEqual([])
    expect(await intentsOf(alice)).toEqual([])
    expect(await intentsOf(bob)).toEqual([])
  })

  test('a paused vault skips the day with an event saying why and does not stop other accounts', async () => {
    const fx = await ledgerFixture(app, 'Policy Org E')
    await createVault(app, 'pausing', { minSubscription: '1' })
    const alice = await fx.mint('alice')
    const bob = await fx.mint('bob')
    await fx.fund(alice, '300')
    await fx.fund(bob, '300')
    await putPolicy(fx, alice, { vaultId: 'pausing', buffer: '100', enabled: true })
    await putPolicy(fx, bob, { vaultId: 'save', buffer: '100', enabled: true })
    await app.ops('POST', '/ops/v1/vaults/pausing/pause')
    await policies().runOnce()
    expect(await runsOf(alice)).toEqual([{ day: await orgDay(fx), outcome: 'skipped', reason: 'vault_paused', amount: '200000000', intent_id: null }])
    expect(await fx.balance(alice)).toMatchObject({ available: '300.000000', inFlight: '0.000000' })
    const [skipped] = (await eventsOf(app, 'account.save_policy.skipped')).filter((event) => event.data.accountId === alice)
    expect(skipped).toMatchObject({ orgId: fx.org.id, data: { accountId: alice, externalId: 'alice', vaultId: 'pausing', reason: 'vault_paused', amount: '200.000000' } })
    expect((await runsOf(bob)).map((run) => run.outcome)).toEqual(['subscribed'])
    // The skip is in the organization's event log.
    const log = await fx.call('GET', '/v1/events?types=account.save_policy.skipped')
    expect(log.body.events.map((event: any) => event.data.accountId)).toEqual([alice])
    // Unpaused, the next day subscribes.
    await app.ops('POST', '/ops/v1/vaults/pausing/unpause')
    await nextDay(fx)
    await policies().runOnce()
    expect((await runsOf(alice)).map((run) => run.outcome)).toEqual(['skipped', 'subscribed'])
  })

  test('a stale price, an excess under the vault\'s minimum or a frozen account skips the day with its reason', async () => {
    const fx = await ledgerFixture(app, 'Policy Org F')
    await createVault(app, 'stale', { minSubscription: '1', priceMaxAgeSeconds: 3600 })
    const alice = await fx.mint('alice')
    const bob = await fx.mint('bob')
    const carol = await fx.mint('carol')
    await fx.fund(alice, '50')
    await fx.fund(bob, '10.5')
    await fx.fund(carol, '20')
    await putPolicy(fx, alice, { vaultId: 'stale', buffer: '0', enabled: true })
    await putPolicy(fx, bob, { vaultId: 'save', buffer: '10', enabled: true })
    await putPolicy(fx, carol, { vaultId: 'save', buffer: '0', enabled: true })
    expect((await app.ops('POST', `/ops/v1/accounts/${carol}/freeze`)).status).toBe(200)
    // The vaults' clock moves two hours without a price sync: the stale vault's price is too old.
    await app.ops('POST', '/ops/v1/vaults/clock/advance', { seconds: 7200 })
    await policies().runOnce()
    expect((await runsOf(alice)).map((run) => [run.outcome, run.reason])).toEqual([['skipped', 'stale_price']])
    expect((await runsOf(bob)).map((run) => [run.outcome, run.reason, run.amount])).toEqual([['skipped', 'below_minimum', '500000']])
    expect((await runsOf(carol)).map((run) => [run.outcome, run.reason])).toEqual([['skipped', 'account_frozen']])
    const reasons = (await eventsOf(app, 'account.save_policy.skipped')).filter((event) => event.orgId === fx.org.id).map((event) => event.data.reason)
    expect(reasons.sort()).toEqual(['account_frozen', 'below_minimum', 'stale_price'])
    expect(await intentsOf(alice)).toEqual([])
    expect(await intentsOf(carol)).toEqual([])
    await app.kassa.earning!.runOnce()
  })

  test('an account whose run fails is left unrecorded for the next pass, and the others still run', async () => {
    const fx = await ledgerFixture(app, 'Policy Org I')
    const alice = await fx.mint('alice')
    const bob = await fx.mint('bob')
    await fx.fund(alice, '40')
    await fx.fund(bob, '40')
    await putPolicy(fx, bob, { vaultId: 'save', buffer: '0', enabled: true })
    // A policy naming a vault that does not exist (written past the API, which refuses it): its run fails.
    await app.kassa.runtime.db.execute(sql`insert into save_policies values (${fx.org.id}, ${alice}, 'ghost', 0, true, now(), now())`)
    const pass = await policies().runOnce()
    expect(pass.failed).toBe(1)
    expect(await runsOf(alice)).toEqual([])
    expect((await runsOf(bob)).map((run) => run.outcome)).toEqual(['subscribed'])
    await app.kassa.runtime.db.execute(sql`delete from save_policies where account_id = ${alice}`)
  })

  test('two passes at once and a restart still run each account once a day', async () => {
    const fx = await ledgerFixture(app, 'Policy Org G')
    const alice = await fx.mint('alice')
    await fx.fund(alice, '500')
    await putPolicy(fx, alice, { vaultId: 'save', buffer: '100', enabled: true })
    await Promise.all([policies().runOnce(), policies().runOnce()])
    expect(await intentsOf(alice)).toHaveLength(1)
    expect(await runsOf(alice)).toHaveLength(1)
    await fx.fund(alice, '50')
    const second = await restartOnSameDatabase(app)
    try {
      await second.earning!.savePolicies.runOnce()
      await second.runtime.ledger.drain()
      expect(await intentsOf(alice)).toHaveLength(1)
      expect(await runsOf(alice)).toHaveLength(1)
    } finally {
      for (const stop of second.runtime.stoppers.splice(0)) await stop()
    }
  })

  test('a replayed Idempotency-Key on PUT answers the first write', async () => {
    const fx = await ledgerFixture(app, 'Policy Org H')
    const alice = await fx.mint('alice')
    const headers = { 'idempotency-key': 'policy-once' }
    const first = await app.call('PUT', `/v1/accounts/${alice}/save-policy`, { key: fx.org.testKey, body: { vaultId: 'save', buffer: '5', enabled: true }, headers })
    const second = await app.call('PUT', `/v1/accounts/${alice}/save-policy`, { key: fx.org.testKey, body: { vaultId: 'save', buffer: '5', enabled: true }, headers })
    expect(second.body).toEqual(first.body)
    expect(second.headers.get('idempotent-replayed')).toBe('true')
    await expectRefusedWithoutChange(app, () => app.call('PUT', `/v1/accounts/${alice}/save-policy`, { key: fx.org.testKey, body: { vaultId: 'save', buffer: '6', enabled: true }, headers }), 409, 'idempotency_conflict')
  })
})
