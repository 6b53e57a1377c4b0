import { afterAll, beforeAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'
import { available, call, callUntilServed, clusterOrg, LEASE_TTL_MS, OPERATOR_TOKEN, startCluster, startMember, waitForSpread, waitServed, type Cluster, type Member } from './support.ts'

// Failover with three real servers on one fresh Postgres database: the owner of an organization
// killed with `kill -9` mid-stream, and an owner stopped (SIGSTOP) until its lease is taken.
let cluster: Cluster | undefined
let members: Member[] = []
let table: Cluster['table'] | undefined
let key = ''
let orgId = ''
let payer = ''
let payee = ''
/** Transfer ids acknowledged (201) to the clients, by Idempotency-Key. */
const acknowledged = new Map<string, string>()
let keysSent = 0

beforeAll(async () => {
  if (!onPostgres) return
  cluster = await startCluster()
  members = cluster.members
  table = cluster.table
  const first = members[0]!.server.baseUrl
  const org = await clusterOrg(first, 'Failover')
  orgId = org.id
  key = org.key
  payer = (await callUntilServed(first, key, 'POST', '/v1/accounts', { externalId: 'payer' })).body.id
  payee = (await callUntilServed(first, key, 'POST', '/v1/accounts', { externalId: 'payee' })).body.id
  await waitServed(members.map((member) => member.server.baseUrl), key, payer)
  expect((await callUntilServed(first, key, 'POST', `/v1/sandbox/accounts/${payer}/fund`, { asset: 'USDC', amount: '1000000' })).status).toBe(201)
}, 120_000)

afterAll(() => cluster?.end(), 60_000)

const alive = () => members.filter((member) => member.server.child.exitCode === null && member.server.child.signalCode === null)

/**
 * One transfer of 1 with an Idempotency-Key of its own, sent through `pick()` and sent again
 * (same key) through the next pick while the answer is not definite (503 while the owner changes,
 * or no answer from a killed server), until it is acknowledged; answers when it was.
 */
async function transferOnce(pick: () => string, until: number): Promise<{ key: string; id: string; sentAt: number; answeredAt: number }> {
  const idempotencyKey = `t-${++keysSent}-${Math.random().toString(36).slice(2, 8)}`
  const sentAt = performance.now()
  for (;;) {
    const answer = await call(pick(), key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '1' }, { 'idempotency-key': idempotencyKey })
    if (answer.status === 201) {
      acknowledged.set(idempotencyKey, answer.body.id)
      return { key: idempotencyKey, id: answer.body.id, sentAt, answeredAt: performance.now() }
    }
    if (answer.status !== 0 && answer.status !== 503 && answer.body?.error?.code !== 'idempotency_in_progress') {
      throw new Error(`transfer ${idempotencyKey}: ${answer.status} ${JSON.stringify(answer.body)}`)
    }
    if (performance.now() > until) throw new Error(`transfer ${idempotencyKey} not acknowledged in time; last ${answer.status} ${JSON.stringify(answer.body)}`)
    await Bun.sleep(20)
  }
}

/** Every acknowledged transfer is in the database once, the payer's balance says so through every live server, and verify is OK. */
async function expectExactlyOnce(): Promise<void> {
  const rows = await table!.rows<{ id: string }>(`select id from transfers where org_id = $1 and source_account_id = $2`, [orgId, payer])
  const stored = new Set(rows.map((row) => row.id))
  expect(stored.size).toBe(rows.length)
  for (const id of acknowledged.values()) expect(stored.has(id)).toBe(true)
  // A transfer retried with its key until acknowledged: none stored without its acknowledgment.
  expect(rows.length).toBe(acknowledged.size)
  const expected = 1_000_000n * 1_000_000n - BigInt(rows.length) * 1_000_000n
  for (const member of alive()) {
    await waitServed([member.server.baseUrl], key, payer)
    expect(BigInt((await available(member.server.baseUrl, key, payer)).replace('.', ''))).toBe(expected)
    const report = await call(member.server.baseUrl, OPERATOR_TOKEN, 'GET', '/ops/v1/ledger/verify')
    expect(report.body.problems).toEqual([])
    expect(report.body.ok).toBe(true)
  }
}

test.skipIf(!onPostgres)('kill -9 of the owner mid-stream: after failover every acknowledged transfer is there once, verify is OK; the time to serve again is printed', async () => {
  const owner = (await table!.ownerOf(orgId)).holder
  const victim = members.find((member) => member.id === owner)!
  let killedAt: number | undefined
  let round = 0
  const pick = () => {
    const live = alive()
    return live[round++ % live.length]!.server.baseUrl
  }
  const deadline = performance.now() + 90_000
  const afterKill: number[] = []
  const workers = Array.from({ length: 6 }, async () => {
    // Until the owner is killed and then until each worker has had five acknowledged after it.
    let sinceKill = 0
    while (sinceKill < 5) {
      const done = await transferOnce(pick, deadline)
      if (killedAt !== undefined && done.sentAt > killedAt) {
        sinceKill += 1
        afterKill.push(done.answeredAt - killedAt)
      }
    }
  })
  await eventually(() => acknowledged.size >= 60, { what: 'sixty acknowledged transfers before the kill', timeoutMs: 60_000 })
  await victim.server.kill9()
  killedAt = performance.now()
  await Promise.all(workers)
  const served = Math.min(...afterKill)
  console.log(
    `cluster failover: owner ${victim.id} killed after ${acknowledged.size - afterKill.length} acknowledged transfers; ` +
      `the organization was served again ${served.toFixed(0)} ms after the kill (lease ${LEASE_TTL_MS} ms); new owner ${(await table!.ownerOf(orgId)).holder}`,
  )
  expect((await table!.ownerOf(orgId)).holder).not.toBe(victim.id)
  await expectExactlyOnce()
}, 180_000)

test.skipIf(!onPostgres)('an owner stopped (SIGSTOP) until its lease is taken cannot commit when it wakes: nothing applied twice, balances right everywhere', async () => {
  const before = await table!.ownerOf(orgId)
  const sleeper = members.find((member) => member.id === before.holder)!
  const others = alive().filter((member) => member !== sleeper)
  // A stream sent to the owner itself, so that operations are on their way when it stops.
  const toSleeper = Array.from({ length: 8 }, () =>
    call(sleeper.server.baseUrl, key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '1' }, { 'idempotency-key': `s-${Math.random().toString(36).slice(2)}` }),
  )
  sleeper.server.child.kill('SIGSTOP')
  const taken = (await eventually(
    async () => {
      const now = await table!.ownerOf(orgId)
      return now.holder !== sleeper.id && now.live && now.epoch > before.epoch ? now : undefined
    },
    { what: 'the stopped owner’s partition taken by another server', timeoutMs: 30_000, intervalMs: 50 },
  ))!
  // Served by the new owner meanwhile.
  const deadline = performance.now() + 60_000
  const pickOther = () => others[Math.floor(Math.random() * others.length)]!.server.baseUrl
  for (let index = 0; index < 5; index++) await transferOnce(pickOther, deadline)
  sleeper.server.child.kill('SIGCONT')
  const woke = await Promise.all(toSleeper)
  // What the woken server answered for the requests it held while stopped: each is acknowledged
  // (committed before it stopped, hence before the taking) or refused; none committed after.
  for (const answer of woke) {
    if (answer.status === 201) acknowledged.set(`sleeper-${answer.body.id}`, answer.body.id)
    else expect([503, 0]).toContain(answer.status)
  }
  console.log(
    `cluster fencing: the stopped owner ${sleeper.id} (epoch ${before.epoch}) lost to ${taken.holder} (epoch ${taken.epoch}); ` +
      `of the ${woke.length} requests it held: ${woke.filter((answer) => answer.status === 201).length} acknowledged, ` +
      `${woke.filter((answer) => answer.status === 503).length} refused 503 (${[...new Set(woke.filter((answer) => answer.status === 503).map((answer) => answer.body.error.message))].join(' | ')})`,
  )
  // Requests through the woken server go to the new owner now (or are answered by it once it owns again).
  await transferOnce(() => sleeper.server.baseUrl, performance.now() + 30_000)
  await expectExactlyOnce()
}, 180_000)

test.skipIf(!onPostgres)('a server joining under load takes its share of partitions from the others: nothing lost, nothing applied twice', async () => {
  const deadline = performance.now() + 120_000
  let round = 0
  const pick = () => {
    const live = alive()
    return live[round++ % live.length]!.server.baseUrl
  }
  let joined = false
  const workers = Array.from({ length: 4 }, async () => {
    // Until the new server holds its share, and then ten more each.
    let after = 0
    while (after < 10) {
      await transferOnce(pick, deadline)
      if (joined) after += 1
    }
  })
  const joiner = await startMember(cluster!.database.databaseUrl!, 'd')
  members.push(joiner)
  await waitForSpread(table!, alive().map((member) => member.id))
  joined = true
  await Promise.all(workers)
  console.log(`cluster rebalance: partitions per server after the join: ${JSON.stringify(await table!.spread())}`)
  await expectExactlyOnce()
}, 180_000)
