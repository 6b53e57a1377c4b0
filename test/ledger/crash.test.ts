import { afterAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { jsonClient, loadUntil, startServerProcess, crashStorage, type CrashStorage, type ServerProcess } from '../support/server-process.ts'

const OPERATOR_TOKEN = 'crash-test-operator-token-0123456789abcdef'
const ROUNDS = 3
const WORKERS = 8
const LOAD_BEFORE_KILL_MS = 300
/** Each round kills the server only after this many new transfers were answered (or 20 s passed). */
const ANSWERS_PER_ROUND_MIN = 15

let storage: CrashStorage | undefined
let server: ServerProcess | undefined

afterAll(async () => {
  await server?.kill9()
  await storage?.release()
})

async function allTransfers(send: ReturnType<typeof jsonClient>): Promise<Array<{ description: string; destinationAccountId: string; netAmount: string }>> {
  const transfers: Array<{ id: string; description: string; destinationAccountId: string; netAmount: string }> = []
  let after: string | undefined
  for (;;) {
    const page = await send('GET', `/v1/transfers?limit=200${after ? `&after=${after}` : ''}`)
    transfers.push(...page.body.transfers)
    if (!page.body.hasMore) return transfers
    after = transfers.at(-1)!.id
  }
}

const minor = (value: string) => BigInt(value.replace('.', ''))

test(`transfers acknowledged before kill -9 survive restarts and refused ones never appear (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  storage = await crashStorage('kassa-crash-')
  const env: Record<string, string> = { ...storage.env, OPERATOR_TOKEN }
  server = await startServerProcess(env)
  const base = () => server!.baseUrl
  const ops = jsonClient(base, OPERATOR_TOKEN)
  const org = (await ops('POST', '/ops/v1/orgs', { name: 'Crash' })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  await ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 10_000_000 })
  const send = jsonClient(base, key)
  const rich = (await send('POST', '/v1/accounts', { externalId: 'rich' })).body.id
  const poor = (await send('POST', '/v1/accounts', { externalId: 'poor' })).body.id
  const sink = (await send('POST', '/v1/accounts', { externalId: 'sink' })).body.id
  expect((await send('POST', `/v1/sandbox/accounts/${rich}/fund`, { asset: 'USDC', amount: '1000000' })).status).toBe(201)

  const acknowledged = new Set<string>()
  const refused = new Set<string>()
  for (let round = 0; round < ROUNDS; round++) {
    let sequence = 0
    let killed = false
    const worker = async () => {
      while (!killed) {
        const description = `r${round}-${sequence++}`
        // Every fourth transfer comes from an empty account: a definite refusal that must never appear.
        const source = sequence % 4 === 0 ? poor : rich
        try {
          const response = await send('POST', '/v1/transfers', { sourceAccountId: source, destinationAccountId: sink, asset: 'USDC', amount: '1', description })
          if (response.status === 201) acknowledged.add(description)
          else if (response.status === 422) refused.add(description)
        } catch {
          // The connection died with the server: the outcome is unknown, and either is allowed.
        }
      }
    }
    const answeredBefore = acknowledged.size + refused.size
    const load = Array.from({ length: WORKERS }, worker)
    await loadUntil(() => acknowledged.size + refused.size >= answeredBefore + ANSWERS_PER_ROUND_MIN, { minMs: LOAD_BEFORE_KILL_MS, maxMs: 20_000 })
    await server.kill9()
    killed = true
    await Promise.all(load)
    server = await startServerProcess(env)
    const present = await allTransfers(send)
    const descriptions = new Set(present.map((transfer) => transfer.description))
    expect([...acknowledged].filter((description) => !descriptions.has(description))).toEqual([])
    expect([...refused].filter((description) => descriptions.has(description))).toEqual([])
    const received = present.reduce((sum, transfer) => sum + minor(transfer.netAmount), 0n)
    const balances = await send('GET', `/v1/accounts/${sink}/balances`)
    expect(minor(balances.body.balances.find((entry: { asset: string }) => entry.asset === 'USDC').available)).toBe(received)
    const report = (await ops('GET', '/ops/v1/ledger/verify')).body
    expect(report.problems).toEqual([])
    expect(report.ok).toBe(true)
  }
  expect(acknowledged.size).toBeGreaterThan(ROUNDS * 10)
  expect(refused.size).toBeGreaterThan(ROUNDS)
}, 180_000)
