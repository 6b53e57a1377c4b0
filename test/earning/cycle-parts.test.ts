import { afterAll, beforeAll, expect, test } from 'bun:test'
import { ApiError } from '../../server/lib/errors.ts'
import { Cycles } from '../../server/modules/earning/cycles.ts'
import { VaultClock } from '../../server/modules/vaults/clock.ts'
import { VaultCatalog } from '../../server/modules/vaults/service.ts'
import { SandboxVenue } from '../../server/modules/vaults/venue.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { createVault, eventsOf, intentRows, openCycleOf } from './support.ts'

// A cycle resolved the way a cluster resolves it (decided once, then one part per organization),
// in one process on either database: each organization's part goes to `carryOutPart` here, as the
// gate sends it to the organization's owner in a cluster (test/cluster/earning.test.ts runs that).
let app: TestApp
let orgs: LedgerFixture[] = []
let cycles: Cycles
/** Organizations whose owner "does not answer": their part fails. */
const unanswered = new Set<string>()

beforeAll(async () => {
  app = await startTestApp()
  orgs = [await ledgerFixture(app, 'Parts One'), await ledgerFixture(app, 'Parts Two')]
  await createVault(app, 'parted', { subscriptionFeeBps: 100 })
  const { db, ledger } = app.kassa.runtime
  const clock = new VaultClock(db, () => app.kassa.runtime.clock.wallNowMs())
  await clock.load()
  const venue = new SandboxVenue(db)
  cycles = new Cycles({
    db,
    ledger,
    vaults: new VaultCatalog({ db, clock, venue }),
    venue,
    crashPoint: undefined,
    async parts(cycleId, orgId) {
      if (unanswered.has(orgId)) throw new Error('the owner did not answer')
      await cycles.carryOutPart(cycleId, orgId)
    },
  })
}, 60_000)

afterAll(() => app.close())

async function subscribed(fx: LedgerFixture, externalId: string, amounts: string[]): Promise<string> {
  const account = await fx.mint(externalId)
  await fx.fund(account, '100')
  for (const amount of amounts) expect((await fx.call('POST', '/v1/subscriptions', { accountId: account, vaultId: 'parted', amount })).status).toBe(201)
  return account
}

test('an organization whose part fails leaves the cycle closed with its settlement decided; the retry settles the rest once, at the same price', async () => {
  await subscribed(orgs[0]!, 'first', ['10', '20'])
  await subscribed(orgs[1]!, 'second', ['40'])
  const cycle = await openCycleOf(app, 'parted', 'deposit')
  unanswered.add(orgs[1]!.org.id)
  const refused = await cycles.settle(cycle.cycleId).catch((error: unknown) => error)
  expect(refused).toBeInstanceOf(ApiError)
  expect((refused as ApiError).code).toBe('partner_unavailable')
  expect((refused as ApiError).message).toContain('1 organization(s) wait for their part')
  const decided = await cycles.require(cycle.cycleId)
  expect({ state: decided.state, resolution: decided.resolution }).toEqual({ state: 'closed', resolution: 'settle' })
  const byOrg = async () => Object.groupBy(await intentRows(app, cycle.cycleId), (row) => (row.state === 'settled' ? 'settled' : 'waiting'))
  expect((await byOrg()).settled).toHaveLength(2)
  expect((await byOrg()).waiting).toHaveLength(1)
  expect(await eventsOf(app, 'vault.cycle.settled')).toEqual([])

  // The decision stands: a roll back now is refused, and changes nothing.
  const rollback = await cycles.rollback(cycle.cycleId).catch((error: unknown) => error)
  expect((rollback as ApiError).code).toBe('conflict')

  unanswered.clear()
  const settled = await cycles.settle(cycle.cycleId)
  expect(settled.state).toBe('settled')
  expect(settled.price).toBe(decided.resolutionPrice)
  // 1 % fee: 9.9 + 19.8 + 39.6 net.
  expect(settled.totalAmount).toBe(69_300_000n)
  expect(settled.intents).toBe(3)
  const prices = new Set((await eventsOf(app, 'transaction.deposit.settled')).map((event) => event.data.sharePrice))
  expect(prices.size).toBe(1)
  const [cycleEvent, ...more] = await eventsOf(app, 'vault.cycle.settled')
  expect(more).toEqual([])
  expect(cycleEvent!.data).toMatchObject({ cycleId: cycle.cycleId, intents: 3, totalAmount: '69.300000', digest: decided.resolutionDigest })
  // Settling again, or a part asked again, moves nothing.
  expect((await cycles.settle(cycle.cycleId)).totalAmount).toBe(69_300_000n)
  expect(await cycles.carryOutPart(cycle.cycleId, orgs[0]!.org.id)).toBe(0)
  const verify = await app.ops('GET', '/ops/v1/ledger/verify')
  expect(verify.body.problems).toEqual([])
})

test('a roll back decided in parts gives every organization back exactly what it put in, once', async () => {
  const first = await subscribed(orgs[0]!, 'back-first', ['30'])
  const second = await subscribed(orgs[1]!, 'back-second', ['5'])
  const cycle = await openCycleOf(app, 'parted', 'deposit')
  unanswered.add(orgs[0]!.org.id)
  expect(((await cycles.rollback(cycle.cycleId).catch((error: unknown) => error)) as ApiError).code).toBe('partner_unavailable')
  unanswered.clear()
  const rolledBack = await cycles.rollback(cycle.cycleId)
  expect(rolledBack.state).toBe('rolled_back')
  expect(rolledBack.totalAmount).toBe(35_000_000n)
  expect((await intentRows(app, cycle.cycleId)).map((row) => [row.state, row.reason])).toEqual([
    ['cancelled', 'rollback'],
    ['cancelled', 'rollback'],
  ])
  expect((await orgs[0]!.call('GET', `/v1/accounts/${first}/balances`)).body.balances.find((row: any) => row.asset === 'USDC').available).toBe('100.000000')
  expect((await orgs[1]!.call('GET', `/v1/accounts/${second}/balances`)).body.balances.find((row: any) => row.asset === 'USDC').available).toBe('100.000000')
  expect(await eventsOf(app, 'vault.cycle.rolled_back')).toHaveLength(1)
  expect((await app.ops('GET', '/ops/v1/ledger/verify')).body.problems).toEqual([])
})
