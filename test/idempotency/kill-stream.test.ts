import { afterAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { loadUntil, startServerProcess, crashStorage, type CrashStorage, type ServerProcess } from '../support/server-process.ts'

const OPERATOR_TOKEN = 'kill-stream-operator-token-0123456789abcdef'
const KILLS = 5
const WORKERS = 6
/** Each round streams this long (and until a few answers came) before the kill. */
const ROUND_MS = 400
const ROUND_ANSWERS_MIN = 10
const FUNDED = 1_000_000

let storage: CrashStorage | undefined
let server: ServerProcess | undefined

afterAll(async () => {
  await server?.kill9()
  await storage?.release()
}, 60_000)

interface Keyed {
  key: string
  kind: 'transfer' | 'hold' | 'capture' | 'release'
  path: string
  body: unknown
}

async function send(token: string, method: string, path: string, body?: unknown, idempotencyKey?: string): Promise<{ status: number; text: string }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
  if (idempotencyKey !== undefined) headers['idempotency-key'] = idempotencyKey
  const response = await fetch(`${server!.baseUrl}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  return { status: response.status, text: await response.text() }
}

test(`a keyed stream of transfers, holds, captures and releases killed with kill -9 ${KILLS} times: every cut-off request retried with its key runs once (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  storage = await crashStorage('kassa-kill-stream-')
  const env: Record<string, string> = { OPERATOR_TOKEN, ...storage.env }
  server = await startServerProcess(env)
  const org = JSON.parse((await send(OPERATOR_TOKEN, 'POST', '/ops/v1/orgs', { name: 'Kill stream' })).text)
  const apiKey = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  await send(OPERATOR_TOKEN, 'PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 10_000_000 })
  const rich = JSON.parse((await send(apiKey, 'POST', '/v1/accounts', { externalId: 'rich' })).text).id as string
  const sink = JSON.parse((await send(apiKey, 'POST', '/v1/accounts', { externalId: 'sink' })).text).id as string
  expect((await send(apiKey, 'POST', `/v1/sandbox/accounts/${rich}/fund`, { asset: 'USDC', amount: String(FUNDED) })).status).toBe(201)

  const answers = new Map<string, { request: Keyed; status: number; text: string }>()
  /** Requests sent but not answered (cut off by a kill, or met in progress): sent again with their key. */
  const retries: Keyed[] = []
  const pendingHolds: string[] = []
  let sequence = 0
  let cutOff = 0

  const next = (): Keyed => {
    const retry = retries.shift()
    if (retry) return retry
    const n = sequence++
    const key = `ks-${n}`
    if (n % 4 === 3 && pendingHolds.length > 0) {
      const holdId = pendingHolds.shift()!
      return n % 8 === 3
        ? { key, kind: 'capture', path: `/v1/holds/${holdId}/capture`, body: { destinationAccountId: sink } }
        : { key, kind: 'release', path: `/v1/holds/${holdId}/release`, body: undefined }
    }
    if (n % 4 === 2) return { key, kind: 'hold', path: '/v1/holds', body: { accountId: rich, asset: 'USDC', amount: '1', expiresInSeconds: 3600 } }
    return { key, kind: 'transfer', path: '/v1/transfers', body: { sourceAccountId: rich, destinationAccountId: sink, asset: 'USDC', amount: '1', description: key } }
  }

  /** Sends one request; false when the server is gone (the request waits for the next one). */
  const attempt = async (request: Keyed): Promise<boolean> => {
    let answer: { status: number; text: string }
    try {
      answer = await send(apiKey, 'POST', request.path, request.body, request.key)
    } catch {
      cutOff += 1
      retries.push(request)
      return false
    }
    if (answer.status === 409 && answer.text.includes('idempotency_in_progress')) {
      retries.push(request)
      return true
    }
    answers.set(request.key, { request, status: answer.status, text: answer.text })
    if (request.kind === 'hold' && answer.status === 201) pendingHolds.push(JSON.parse(answer.text).id)
    return true
  }

  for (let kill = 0; kill < KILLS; kill++) {
    let stop = false
    const answeredBefore = answers.size
    const worker = async () => {
      while (!stop) if (!(await attempt(next()))) return
    }
    const load = Array.from({ length: WORKERS }, worker)
    await loadUntil(() => answers.size - answeredBefore >= ROUND_ANSWERS_MIN, { minMs: ROUND_MS, maxMs: 20_000 })
    await server.kill9()
    stop = true
    await Promise.all(load)
    server = await startServerProcess(env)
  }
  // After the last restart, every request still unanswered is retried with its key until answered.
  for (let round = 0; retries.length > 0 && round < 50; round++) {
    const batch = retries.splice(0)
    for (const request of batch) expect(await attempt(request)).toBe(true)
  }
  expect(retries).toEqual([])

  // Every request got an answer of success: a capture or release whose first attempt committed
  // gets that answer again, never hold_not_active.
  const failures = [...answers.values()].filter((answer) => answer.status !== 200 && answer.status !== 201)
  expect(failures.map((answer) => `${answer.request.kind} ${answer.status} ${answer.text}`)).toEqual([])

  // Duplicates: transfers listed per description (each request's key), and holds by the money held.
  const transfers: Array<{ id: string; description: string | null; holdId: string | null }> = []
  for (let after: string | undefined; ; ) {
    const page = JSON.parse((await send(apiKey, 'GET', `/v1/transfers?limit=200${after ? `&after=${after}` : ''}`)).text)
    transfers.push(...page.transfers)
    if (!page.hasMore) break
    after = transfers.at(-1)!.id
  }
  const streamed = transfers.filter((transfer) => transfer.description?.startsWith('ks-'))
  const transferDuplicates = streamed.length - new Set(streamed.map((transfer) => transfer.description)).size
  const answered = (kind: Keyed['kind']) => [...answers.values()].filter((answer) => answer.request.kind === kind)
  for (const answer of answered('transfer')) expect(streamed.filter((transfer) => transfer.description === answer.request.key).map((transfer) => transfer.id)).toEqual([JSON.parse(answer.text).id])
  const captures = transfers.filter((transfer) => transfer.holdId !== null).length
  const balances = JSON.parse((await send(apiKey, 'GET', `/v1/accounts/${rich}/balances`)).text).balances as Array<{ asset: string; available: string; held: string }>
  const usdc = balances.find((balance) => balance.asset === 'USDC')!
  const held = Number(usdc.held)
  const holdDuplicates = held - pendingHolds.length
  const moneyDuplicates = FUNDED - answered('transfer').length - answered('capture').length - (Number(usdc.available) + held)
  const duplicates = transferDuplicates + holdDuplicates + moneyDuplicates + (captures - answered('capture').length)
  console.log(
    `kill -9 stream: ${answers.size} keyed requests (${answered('transfer').length} transfers, ${answered('hold').length} holds, ${answered('capture').length} captures, ${answered('release').length} releases), ${KILLS} kills, ${cutOff} cut off and retried, duplicates: ${duplicates}`,
  )
  expect({ transferDuplicates, holdDuplicates, moneyDuplicates, captureDuplicates: captures - answered('capture').length }).toEqual({ transferDuplicates: 0, holdDuplicates: 0, moneyDuplicates: 0, captureDuplicates: 0 })
  expect(cutOff).toBeGreaterThan(0)
  const verify = JSON.parse((await send(OPERATOR_TOKEN, 'GET', '/ops/v1/ledger/verify')).text)
  expect(verify.ok).toBe(true)
}, 300_000)
