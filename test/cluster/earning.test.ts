import { afterAll, beforeAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'
import { available, call, callUntilServed, clusterOrg, OPERATOR_TOKEN, startCluster, verifiedEverywhere, waitServed, type Cluster, type Member } from './support.ts'

// Earning across three real servers in cluster mode on one Postgres database: a cycle's
// organizations are owned by different servers, and its settlement or roll back is carried out by
// each owner, under its fence (docs/scale-out.md, "Earning in a cluster").
let cluster: Cluster | undefined
let members: Member[] = []
let table: Cluster['table'] | undefined
/** Two organizations whose partitions are held by different servers, and the server that holds neither. */
let orgs: Array<{ id: string; key: string; owner: Member }> = []
let bystander: Member | undefined

const urls = () => members.map((member) => member.server.baseUrl)

beforeAll(async () => {
  if (!onPostgres) return
  cluster = await startCluster({ EARNING_WORKER_INTERVAL_MS: '0' })
  members = cluster.members
  table = cluster.table
  const byOwner = new Map<string, { id: string; key: string; owner: Member }>()
  for (let index = 0; byOwner.size < 2 && index < 40; index++) {
    const org = await clusterOrg(urls()[0]!, `Saver ${index}`)
    const holder = (await table.ownerOf(org.id)).holder!
    if (!byOwner.has(holder)) byOwner.set(holder, { ...org, owner: members.find((member) => member.id === holder)! })
  }
  orgs = [...byOwner.values()]
  expect(orgs).toHaveLength(2)
  bystander = members.find((member) => !byOwner.has(member.id))!
  const vault = await call(bystander.server.baseUrl, OPERATOR_TOKEN, 'POST', '/ops/v1/vaults', { vaultId: 'shared', name: 'Shared vault', asset: 'USDC', minSubscription: '1', minRedemption: '0.5' })
  expect(vault.status).toBe(201)
}, 120_000)

afterAll(() => cluster?.end(), 60_000)

/** An account of the organization, funded with `amount` USDC, through a server that does not own it. */
async function saver(org: { key: string; owner: Member }, externalId: string, amount: string): Promise<string> {
  const through = members.find((member) => member !== org.owner)!.server.baseUrl
  const created = await callUntilServed(through, org.key, 'POST', '/v1/accounts', { externalId })
  expect(created.status).toBe(201)
  await waitServed(urls(), org.key, created.body.id)
  expect((await callUntilServed(through, org.key, 'POST', `/v1/sandbox/accounts/${created.body.id}/fund`, { asset: 'USDC', amount })).status).toBe(201)
  return created.body.id
}

async function subscribe(org: { key: string }, through: string, accountId: string, amount: string): Promise<string> {
  const created = await call(through, org.key, 'POST', '/v1/subscriptions', { accountId, vaultId: 'shared', amount })
  expect(created.status).toBe(201)
  return created.body.id
}

async function openDepositCycle(): Promise<{ cycleId: string }> {
  const cycles = await call(bystander!.server.baseUrl, OPERATOR_TOKEN, 'GET', '/ops/v1/vaults/shared/cycles')
  return cycles.body.cycles.find((cycle: { cycleKind: string; state: string }) => cycle.cycleKind === 'deposit' && cycle.state === 'open')
}

const verified = () => verifiedEverywhere(urls())

test.skipIf(!onPostgres)('a cycle with organizations owned by two servers, settled through the third: each owner moves its own, every server answers the same', async () => {
  const accounts = [await saver(orgs[0]!, 'saver-0', '100'), await saver(orgs[1]!, 'saver-1', '100')]
  // Subscribed through the server that owns neither: forwarded to each owner.
  const intents = [await subscribe(orgs[0]!, bystander!.server.baseUrl, accounts[0]!, '40'), await subscribe(orgs[1]!, bystander!.server.baseUrl, accounts[1]!, '30')]
  const cycle = await openDepositCycle()
  const settled = await call(bystander!.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`, { operator: 'Ada' })
  expect(settled.status).toBe(200)
  expect(settled.body.state).toBe('settled')
  expect(settled.body.intents).toBe(2)
  expect(settled.body.totalAmount).toBe('70.000000')
  for (const [index, org] of orgs.entries()) {
    for (const baseUrl of urls()) {
      expect(await available(baseUrl, org.key, accounts[index]!)).toBe(index === 0 ? '60.000000' : '70.000000')
      const intent = await call(baseUrl, org.key, 'GET', `/v1/subscriptions/${intents[index]}`)
      expect(intent.body.state).toBe('settled')
      // The shares are in the owner's memory: the balance read answers them wherever it arrives.
      const usdc = (await call(baseUrl, org.key, 'GET', `/v1/accounts/${accounts[index]}/balances`)).body.balances.find((entry: { asset: string }) => entry.asset === 'USDC')
      expect(usdc.allocations).toEqual([expect.objectContaining({ vaultId: 'shared', shares: intent.body.shares })])
    }
  }
  // Settling it again changes nothing.
  const again = await call(orgs[0]!.owner.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
  expect(again.status).toBe(200)
  expect(again.body.totalAmount).toBe('70.000000')
  const [events] = await table!.rows<{ count: number }>(`select count(*)::int as count from events where type = 'vault.cycle.settled'`)
  expect(events!.count).toBe(1)
  await verified()
}, 90_000)

test.skipIf(!onPostgres)('an owner that does not answer leaves its part for later: the roll back answers 503 and stays decided; once the organization is served again, a retry finishes it exactly once', async () => {
  const accounts = [await saver(orgs[0]!, 'roller-0', '50'), await saver(orgs[1]!, 'roller-1', '50')]
  const intents = [await subscribe(orgs[0]!, urls()[0]!, accounts[0]!, '20'), await subscribe(orgs[1]!, urls()[1]!, accounts[1]!, '10')]
  const cycle = await openDepositCycle()
  const sleeper = orgs[1]!.owner
  sleeper.server.child.kill('SIGSTOP')
  try {
    const refused = await call(bystander!.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`, { operator: 'Ada' }, { 'idempotency-key': 'rollback-1' })
    expect(refused.status).toBe(503)
    expect(refused.body.error.code).toBe('partner_unavailable')
    expect(refused.body.error.message).toContain('stays closed')
    // The decision holds: a settle now is refused, and the part of the owner that answered is done.
    const settle = await call(bystander!.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/vault-cycles/${cycle.cycleId}/settle`)
    expect(settle.status).toBe(409)
    expect((await call(bystander!.server.baseUrl, orgs[0]!.key, 'GET', `/v1/subscriptions/${intents[0]}`)).body.reason).toBe('rollback')
  } finally {
    sleeper.server.child.kill('SIGCONT')
  }
  // The same key runs again (a 503 keeps no answer), once another server or the woken one serves the organization.
  const finished = await eventually(
    () => call(bystander!.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/vault-cycles/${cycle.cycleId}/rollback`, { operator: 'Ada' }, { 'idempotency-key': 'rollback-1' }),
    { what: 'the roll back finished', timeoutMs: 60_000, intervalMs: 100, accept: (answer) => answer.status !== 503 && answer.status !== 0 },
  )
  expect(finished.status).toBe(200)
  expect(finished.body.state).toBe('rolled_back')
  expect(finished.body.totalAmount).toBe('30.000000')
  for (const [index, org] of orgs.entries()) {
    for (const baseUrl of urls()) {
      // The woken server takes partitions back meanwhile: a read may meet an owner changing (503, retried).
      const balances = await callUntilServed(baseUrl, org.key, 'GET', `/v1/accounts/${accounts[index]}/balances`)
      expect(balances.body.balances.find((entry: { asset: string }) => entry.asset === 'USDC').available).toBe('50.000000')
      expect((await callUntilServed(baseUrl, org.key, 'GET', `/v1/subscriptions/${intents[index]}`)).body.reason).toBe('rollback')
    }
  }
  const [rows] = await table!.rows<{ count: number }>(`select count(*)::int as count from ledger_movements where reference = $1`, [cycle.cycleId])
  expect(rows!.count).toBe(2)
  await verified()
}, 90_000)
