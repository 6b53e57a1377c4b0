import { afterAll, beforeAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { refusedStart } from '../support/server-process.ts'
import { available, call, callUntilServed, clusterOrg, OPERATOR_TOKEN, startCluster, verifiedEverywhere, waitServed, type Cluster, type Member } from './support.ts'

// Three real servers in cluster mode on one fresh Postgres database (the embedded database has no
// cluster mode: its tests are skipped there).
let cluster: Cluster | undefined
let members: Member[] = []
let table: Cluster['table'] | undefined
let key = ''
let orgId = ''

const urls = () => members.map((member) => member.server.baseUrl)

beforeAll(async () => {
  if (!onPostgres) return
  cluster = await startCluster()
  members = cluster.members
  table = cluster.table
  const org = await clusterOrg(urls()[0]!, 'Three Servers', 1_000_000)
  orgId = org.id
  key = org.key
}, 120_000)

afterAll(() => cluster?.end(), 60_000)

async function account(baseUrl: string, externalId: string): Promise<string> {
  const created = await callUntilServed(baseUrl, key, 'POST', '/v1/accounts', { externalId })
  expect(created.status).toBe(201)
  return created.body.id
}

const verified = () => verifiedEverywhere(urls())

test.skipIf(!onPostgres)('the observation replayed: funded 100 through A, B reports 100 and approves a transfer of 60; every server reports 40 and the payee 60 less the fee', async () => {
  const [a, b, c] = urls() as [string, string, string]
  const payer = await account(a, 'payer')
  const payee = await account(a, 'payee')
  await waitServed([a, b, c], key, payer)
  expect((await callUntilServed(a, key, 'POST', `/v1/sandbox/accounts/${payer}/fund`, { asset: 'USDC', amount: '100' })).status).toBe(201)
  expect(await available(b, key, payer)).toBe('100.000000')
  const transfer = await call(b, key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '60' })
  expect(transfer.status).toBe(201)
  // The sandbox's transfer fee comes out of the amount: the payee receives the net.
  expect(transfer.body.totalDebited).toBe('60.000000')
  for (const baseUrl of [a, b, c]) {
    expect(await available(baseUrl, key, payer)).toBe('40.000000')
    expect(await available(baseUrl, key, payee)).toBe(transfer.body.netAmount)
  }
  await verified()
}, 60_000)

test.skipIf(!onPostgres)('read-your-writes through any server: created through one, funded through the next, read through the third', async () => {
  const servers = urls()
  for (let index = 0; index < 3; index++) {
    const created = await account(servers[index]!, `ryw-${index}`)
    expect((await callUntilServed(servers[(index + 1) % 3]!, key, 'POST', `/v1/sandbox/accounts/${created}/fund`, { asset: 'USDC', amount: `${index + 1}` })).status).toBe(201)
    expect(await available(servers[(index + 2) % 3]!, key, created)).toBe(`${index + 1}.000000`)
    expect(await available(servers[index]!, key, created)).toBe(`${index + 1}.000000`)
  }
}, 60_000)

test.skipIf(!onPostgres)('concurrent transfers from one account through all three never overdraw, and every one is answered', async () => {
  const servers = urls()
  const source = await account(servers[0]!, 'race-source')
  const sink = await account(servers[1]!, 'race-sink')
  expect((await callUntilServed(servers[2]!, key, 'POST', `/v1/sandbox/accounts/${source}/fund`, { asset: 'USDC', amount: '10' })).status).toBe(201)
  const attempts = 45
  const answers = await Promise.all(
    Array.from({ length: attempts }, (_, index) =>
      call(servers[index % 3]!, key, 'POST', '/v1/transfers', { sourceAccountId: source, destinationAccountId: sink, asset: 'USDC', amount: '1' }),
    ),
  )
  const statuses = answers.map((answer) => answer.status)
  expect(statuses.filter((status) => status === 201)).toHaveLength(10)
  const refusals = answers.filter((answer) => answer.status !== 201)
  expect(refusals).toHaveLength(attempts - 10)
  for (const refusal of refusals) expect(refusal.body.error.code).toBe('insufficient_available')
  const received = answers.filter((answer) => answer.status === 201).reduce((sum, answer) => sum + BigInt(answer.body.netAmount.replace('.', '')), 0n)
  for (const baseUrl of servers) {
    expect(await available(baseUrl, key, source)).toBe('0.000000')
    expect(BigInt((await available(baseUrl, key, sink)).replace('.', ''))).toBe(received)
  }
  const [row] = await table!.rows<{ count: number }>(`select count(*)::int as count from transfers where org_id = $1 and source_account_id = $2`, [orgId, source])
  expect(row!.count).toBe(10)
  await verified()
}, 60_000)

test.skipIf(!onPostgres)('a partner request through a server that does not own the organization is forwarded, and the internal listener refuses a caller without the secret', async () => {
  const owner = await table!.ownerOf(orgId)
  const other = members.find((member) => member.id !== owner.holder)!
  const owning = members.find((member) => member.id === owner.holder)!
  const payer = await account(other.server.baseUrl, 'forwarded')
  expect((await call(owning.server.baseUrl, key, 'GET', `/v1/accounts/${payer}/balances`)).status).toBe(200)
  const output = owning.server.output()
  const internal = /internal listener on ([\d.]+:\d+)/.exec(output)![1]
  const refused = await call(`http://${internal}`, key, 'GET', `/v1/accounts/${payer}/balances`)
  expect(refused.status).toBe(401)
  expect(refused.body.error.code).toBe('authentication_error')
}, 60_000)

test.skipIf(!onPostgres)('an operator freezing an account through a server that does not own its organization is forwarded to the owner, whose memory then refuses the account as a sender', async () => {
  const owner = await table!.ownerOf(orgId)
  const other = members.find((member) => member.id !== owner.holder)!
  const owning = members.find((member) => member.id === owner.holder)!
  const payer = await account(owning.server.baseUrl, 'frozen-by-operator')
  const payee = await account(owning.server.baseUrl, 'frozen-payee')
  expect((await callUntilServed(owning.server.baseUrl, key, 'POST', `/v1/sandbox/accounts/${payer}/fund`, { asset: 'USDC', amount: '10' })).status).toBe(201)
  const frozen = await call(other.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/accounts/${payer}/freeze`)
  expect(frozen.status).toBe(200)
  // The owner decided it: its memory knows, so a transfer from the account is refused wherever it arrives.
  for (const baseUrl of urls()) {
    const refused = await call(baseUrl, key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '1' })
    expect(refused.body.error?.code).toBe('account_frozen')
  }
  expect((await call(other.server.baseUrl, OPERATOR_TOKEN, 'POST', `/ops/v1/accounts/${payer}/unfreeze`)).status).toBe(200)
  expect((await call(other.server.baseUrl, key, 'POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '1' })).status).toBe(201)
  await verified()
}, 60_000)

test.skipIf(!onPostgres)('a server without cluster mode is refused on a database the cluster serves, naming a member', async () => {
  const { code, stdout: out, stderr: err } = await refusedStart({ DATABASE_URL: cluster!.database.databaseUrl!, OPERATOR_TOKEN, WEBHOOK_DELIVERY_PROCESS: 'false' })
  expect(code).toBe(1)
  expect(err).toContain('a Kassa cluster already serves this database')
  expect(err).toContain('KASSA_CLUSTER=1')
  expect(out).not.toContain('listening on')
  // The members keep serving.
  for (const baseUrl of urls()) expect((await fetch(`${baseUrl}/health`)).status).toBe(200)
}, 60_000)
