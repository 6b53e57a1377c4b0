import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createTestDatabase, onPostgres, type TestDatabase } from '../support/db.ts'

const OPERATOR_TOKEN = 'crash-test-operator-token-0123456789abcdef'
const ROUNDS = 3
const WORKERS = 8
const LOAD_BEFORE_KILL_MS = 500

let database: TestDatabase | undefined
let dataDir: string | undefined
let server: Bun.Subprocess | undefined

afterAll(async () => {
  server?.kill(9)
  await database?.drop()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
})

/** Starts the real server (`bun server/main.ts`) and answers its base URL once it listens. */
async function startServer(env: Record<string, string>): Promise<string> {
  const child = Bun.spawn(['./node_modules/.bin/bun', 'server/main.ts'], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', OPERATOR_TOKEN, ...env },
    stdout: 'pipe',
    stderr: 'inherit',
  })
  server = child
  const reader = child.stdout.getReader()
  let output = ''
  const deadline = Date.now() + 30_000
  while (Date.now() < deadline) {
    const { value, done } = await reader.read()
    if (done) break
    output += new TextDecoder().decode(value)
    const match = /listening on (http:\/\/[\d.]+:\d+)/.exec(output)
    if (match) {
      reader.releaseLock()
      // Keep draining stdout so the child never blocks on a full pipe.
      void child.stdout.pipeTo(new WritableStream())
      return match[1]!
    }
  }
  throw new Error(`server did not start: ${output}`)
}

async function send(base: string, method: string, path: string, key: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { status: response.status, body: await response.json() }
}

async function allTransfers(base: string, key: string): Promise<Array<{ description: string; destinationAccountId: string; netAmount: string }>> {
  const transfers: Array<{ id: string; description: string; destinationAccountId: string; netAmount: string }> = []
  let after: string | undefined
  for (;;) {
    const page = await send(base, 'GET', `/v1/transfers?limit=200${after ? `&after=${after}` : ''}`, key)
    transfers.push(...page.body.transfers)
    if (!page.body.hasMore) return transfers
    after = transfers.at(-1)!.id
  }
}

const minor = (value: string) => BigInt(value.replace('.', ''))

test(`transfers acknowledged before kill -9 survive restarts and refused ones never appear (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  const env: Record<string, string> = {}
  if (onPostgres) {
    database = await createTestDatabase()
    env.DATABASE_URL = database.databaseUrl!
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'kassa-crash-'))
    env.DATA_DIR = dataDir
  }
  let base = await startServer(env)
  const org = await fetch(`${base}/ops/v1/orgs`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Crash' }) }).then((response) => response.json() as Promise<any>)
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  await fetch(`${base}/ops/v1/orgs/${org.id}/limits`, { method: 'PATCH', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ rateLimitPerMinute: 10_000_000 }) })
  const rich = (await send(base, 'POST', '/v1/accounts', key, { externalId: 'rich' })).body.id
  const poor = (await send(base, 'POST', '/v1/accounts', key, { externalId: 'poor' })).body.id
  const sink = (await send(base, 'POST', '/v1/accounts', key, { externalId: 'sink' })).body.id
  expect((await send(base, 'POST', `/v1/sandbox/accounts/${rich}/fund`, key, { asset: 'USDC', amount: '1000000' })).status).toBe(201)

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
          const response = await send(base, 'POST', '/v1/transfers', key, { sourceAccountId: source, destinationAccountId: sink, asset: 'USDC', amount: '1', description })
          if (response.status === 201) acknowledged.add(description)
          else if (response.status === 422) refused.add(description)
        } catch {
          // The connection died with the server: the outcome is unknown, and either is allowed.
        }
      }
    }
    const load = Array.from({ length: WORKERS }, worker)
    await Bun.sleep(LOAD_BEFORE_KILL_MS)
    server!.kill(9)
    await server!.exited
    killed = true
    await Promise.all(load)
    base = await startServer(env)
    const present = await allTransfers(base, key)
    const descriptions = new Set(present.map((transfer) => transfer.description))
    expect([...acknowledged].filter((description) => !descriptions.has(description))).toEqual([])
    expect([...refused].filter((description) => descriptions.has(description))).toEqual([])
    const received = present.reduce((sum, transfer) => sum + minor(transfer.netAmount), 0n)
    const balances = await send(base, 'GET', `/v1/accounts/${sink}/balances`, key)
    expect(minor(balances.body.balances.find((entry: { asset: string }) => entry.asset === 'USDC').available)).toBe(received)
    const report = (await fetch(`${base}/ops/v1/ledger/verify`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }).then((response) => response.json())) as any
    expect(report.problems).toEqual([])
    expect(report.ok).toBe(true)
  }
  expect(acknowledged.size).toBeGreaterThan(ROUNDS * 10)
  expect(refused.size).toBeGreaterThan(ROUNDS)
}, 180_000)
