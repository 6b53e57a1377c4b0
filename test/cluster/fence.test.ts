import { afterAll, expect, test } from 'bun:test'
import { createTestDatabase, onPostgres, serverUrl, type TestDatabase } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'
import { TcpProxy } from '../support/tcp-proxy.ts'
import { available, call, callUntilServed, clusterTable, OPERATOR_TOKEN, startMember, waitServed, type Member } from './support.ts'

// The commit fence between two real servers: the owner's connections to Postgres are black-holed
// (a TCP proxy stalls them) while its batches are on their way, until its leases lapse and a
// second server takes its partitions; then the network heals and those batches reach Postgres.
let database: TestDatabase | undefined
let proxy: TcpProxy | undefined
const members: Member[] = []
let table: ReturnType<typeof clusterTable> | undefined

afterAll(async () => {
  await proxy?.setMode('forwarding')
  await Promise.all(members.map((member) => member.server.stop()))
  await proxy?.close()
  await table?.end()
  await database?.drop()
}, 60_000)

test.skipIf(!onPostgres)('batches of an owner cut off from Postgres until another server took its partitions are refused when they arrive: nothing applied, the new owner’s balances equal the database', async () => {
  database = await createTestDatabase()
  const upstream = new URL(serverUrl!)
  proxy = await TcpProxy.start(upstream.hostname, Number(upstream.port || 5432))
  // Rate counts in memory: a transfer then reads nothing from Postgres before the ledger decides
  // it, so the stall catches it in the writer's batch, on its way to Postgres.
  const cutOff = await startMember(proxy.rewrite(database.databaseUrl!), 'cut-off', { RATE_LIMIT_STORE: 'memory' })
  members.push(cutOff)
  table = clusterTable(database.databaseUrl!)
  const base = cutOff.server.baseUrl
  const org = (await callUntilServed(base, OPERATOR_TOKEN, 'POST', '/ops/v1/orgs', { name: 'Fence' })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  const payer = (await callUntilServed(base, key, 'POST', '/v1/accounts', { externalId: 'payer' })).body.id as string
  const payee = (await callUntilServed(base, key, 'POST', '/v1/accounts', { externalId: 'payee' })).body.id as string
  await waitServed([base], key, payer)
  expect((await callUntilServed(base, key, 'POST', `/v1/sandbox/accounts/${payer}/fund`, { asset: 'USDC', amount: '100' })).status).toBe(201)
  const epochBefore = (await table.ownerOf(org.id)).epoch

  // Cut off: what it sends now waits in the proxy, decided and reserved in its memory.
  await proxy.setMode('stalled')
  const held = Array.from({ length: 5 }, () => call(base, key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '10' }))
  const taker = await startMember(database.databaseUrl!, 'taker')
  members.push(taker)
  await eventually(
    async () => {
      const owner = await table!.ownerOf(org.id)
      return owner.holder === 'taker' && owner.epoch > epochBefore
    },
    { what: 'the partition taken by the second server', timeoutMs: 30_000, intervalMs: 50 },
  )
  await waitServed([taker.server.baseUrl], key, payer)
  // The new owner decides from the database: nothing of the cut-off server's is there.
  expect(await available(taker.server.baseUrl, key, payer)).toBe('100.000000')

  await proxy.setMode('forwarding')
  const answers = await Promise.all(held)
  console.log(`cluster fence: the cut-off owner answered ${answers.map((answer) => `${answer.status} ${answer.body?.error?.message ?? ''}`.trim()).join(' | ')}`)
  // At least the batch that was on its way reached Postgres and was refused there, by the fence.
  expect(answers.some((answer) => answer.body?.error?.message === 'this instance no longer owns the organization; nothing was applied; retry')).toBe(true)
  for (const answer of answers) {
    expect(answer.status).toBe(503)
    expect(answer.body.error.code).toBe('partner_unavailable')
  }
  const [row] = await table.rows<{ count: number }>(`select count(*)::int as count from transfers where org_id = $1`, [org.id])
  expect(row!.count).toBe(0)
  // The new owner's memory equals the database, and a transfer through it is decided on that.
  expect(await available(taker.server.baseUrl, key, payer)).toBe('100.000000')
  const transfer = await call(taker.server.baseUrl, key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '100' })
  expect(transfer.status).toBe(201)
  const report = await call(taker.server.baseUrl, OPERATOR_TOKEN, 'GET', '/ops/v1/ledger/verify')
  expect(report.body.problems).toEqual([])
  expect(report.body.ok).toBe(true)
}, 180_000)
