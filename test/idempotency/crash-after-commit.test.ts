import { afterAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { startServerProcess, crashStorage, type CrashStorage, type ServerProcess } from '../support/server-process.ts'

const OPERATOR_TOKEN = 'crash-after-commit-operator-token-0123456789'
/** Headers a replay may give differently from the first answer (docs/idempotency.md). */
const MAY_DIFFER = new Set(['idempotent-replayed', 'x-request-id', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'date'])

let storage: CrashStorage | undefined
let server: ServerProcess | undefined

afterAll(async () => {
  await server?.kill9()
  await storage?.release()
}, 60_000)

interface Answer {
  status: number
  text: string
  headers: Record<string, string>
}

async function call(token: string, method: string, path: string, body: unknown, key?: string): Promise<Answer> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
  if (key !== undefined) headers['idempotency-key'] = key
  const response = await fetch(`${server!.baseUrl}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: response.status, text: await response.text(), headers: Object.fromEntries(response.headers) }
}

function comparable(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !MAY_DIFFER.has(name)))
}

test(`a money-moving request cut off between its commit and its answer is answered from that commit on retry, never run twice (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  storage = await crashStorage('kassa-exit-after-commit-')
  const env: Record<string, string> = { OPERATOR_TOKEN, ...storage.env }
  server = await startServerProcess(env)
  const org = JSON.parse((await call(OPERATOR_TOKEN, 'POST', '/ops/v1/orgs', { name: 'Exactly once' })).text)
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  const account = async (externalId: string) => JSON.parse((await call(key, 'POST', '/v1/accounts', { externalId })).text).id as string
  const rich = await account('rich')
  const sink = await account('sink')
  expect((await call(key, 'POST', `/v1/sandbox/accounts/${rich}/fund`, { asset: 'USDC', amount: '1000' })).status).toBe(201)
  const hold = async () => JSON.parse((await call(key, 'POST', '/v1/holds', { accountId: rich, asset: 'USDC', amount: '5', expiresInSeconds: 3600 })).text).id as string
  const toCapture = await hold()
  const toRelease = await hold()
  const authorize = async () => JSON.parse((await call(key, 'POST', '/v1/payments/authorize', { accountId: rich, asset: 'USDC', amount: '7' })).text).id as string
  const paymentToCapture = await authorize()
  const paymentToVoid = await authorize()

  const requests: Array<{ name: string; path: string; body: unknown; status: number }> = [
    { name: 'fund', path: `/v1/sandbox/accounts/${rich}/fund`, body: { asset: 'USDC', amount: '100' }, status: 201 },
    { name: 'transfer', path: '/v1/transfers', body: { sourceAccountId: rich, destinationAccountId: sink, asset: 'USDC', amount: '10', description: 'once' }, status: 201 },
    { name: 'hold', path: '/v1/holds', body: { accountId: rich, asset: 'USDC', amount: '3', expiresInSeconds: 3600 }, status: 201 },
    { name: 'capture', path: `/v1/holds/${toCapture}/capture`, body: { destinationAccountId: sink, amount: '4' }, status: 200 },
    { name: 'release', path: `/v1/holds/${toRelease}/release`, body: undefined, status: 200 },
    { name: 'payment capture', path: `/v1/payments/${paymentToCapture}/capture`, body: { amount: '6' }, status: 200 },
    { name: 'payment void', path: `/v1/payments/${paymentToVoid}/void`, body: undefined, status: 200 },
  ]
  const before = JSON.parse((await call(key, 'GET', `/v1/accounts/${rich}/balances`, undefined)).text)

  const keyOf = (index: number) => `crash-${index}-${requests[index]!.name.replace(' ', '-')}`
  /** A retry of a cut-off request replays the committed answer, twice alike (a replay commits nothing, so the switch lets it through). */
  const retry = async (index: number) => {
    const request = requests[index]!
    const first = await call(key, 'POST', request.path, request.body, keyOf(index))
    expect(`${request.name}: ${first.status} ${first.headers['idempotent-replayed']}`).toBe(`${request.name}: ${request.status} true`)
    const again = await call(key, 'POST', request.path, request.body, keyOf(index))
    expect(again.text).toBe(first.text)
    expect(comparable(again.headers)).toEqual(comparable(first.headers))
  }
  await server.stop()
  for (const [index, request] of requests.entries()) {
    // A server that ends itself right after its next keyed commit, before answering.
    server = await startServerProcess({ ...env, KASSA_TEST_EXIT_AFTER_COMMIT: '1' })
    if (index > 0) await retry(index - 1)
    const cut = await call(key, 'POST', request.path, request.body, keyOf(index)).then(
      (answer) => `answered ${answer.status} ${answer.text}`,
      () => 'cut off',
    )
    expect(`${request.name}: ${cut}`).toBe(`${request.name}: cut off`)
    expect(await server.child.exited).toBe(97)
  }
  server = await startServerProcess(env)
  await retry(requests.length - 1)

  // Nothing ran twice: one transfer of 'once', one new hold, and the balance moved exactly once per request.
  const transfers = JSON.parse((await call(key, 'GET', '/v1/transfers?limit=200', undefined)).text).transfers as Array<{ description: string | null }>
  const duplicates = transfers.filter((transfer) => transfer.description === 'once').length - 1
  console.log(`crash after commit: ${requests.length} requests cut off after their commit, duplicates after retry: ${duplicates}`)
  expect(duplicates).toBe(0)
  const after = JSON.parse((await call(key, 'GET', `/v1/accounts/${rich}/balances`, undefined)).text)
  const usdc = (view: { balances: Array<{ asset: string; available: string; held: string }> }) => view.balances.find((balance) => balance.asset === 'USDC')!
  // +100 funded, -10 transferred, -3 held, the 5 of the captured hold gone (4 paid, 1 back), the
  // released hold's 5 back, 6 of the captured payment's 7 paid, 1 back, the voided payment's 7 back.
  expect(Number(usdc(after).available) - Number(usdc(before).available)).toBe(100 - 10 - 3 + 1 + 5 + 1 + 7)
  expect(Number(usdc(after).held) - Number(usdc(before).held)).toBe(3 - 5 - 5 - 7 - 7)
  const verify = await call(OPERATOR_TOKEN, 'GET', '/ops/v1/ledger/verify', undefined)
  expect(JSON.parse(verify.text).ok).toBe(true)
}, 300_000)
