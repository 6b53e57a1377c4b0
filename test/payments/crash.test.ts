import { afterAll, expect, test } from 'bun:test'
import { onPostgres } from '../support/db.ts'
import { jsonClient, loadUntil, startServerProcess, crashStorage, type CrashStorage, type ServerProcess } from '../support/server-process.ts'

const OPERATOR_TOKEN = 'payments-crash-operator-token-0123456789abcdef'
const ROUNDS = 3
const WORKERS = 6
const LOAD_BEFORE_KILL_MS = 300
/** Each round kills the server only after this many new authorizations were answered (or 20 s passed). */
const ANSWERS_PER_ROUND_MIN = 20
const PAYER_FUNDED = 1_000_000n * 1_000_000n
const SHORT_FUNDED = 3n * 1_000_000n

let storage: CrashStorage | undefined
let server: ServerProcess | undefined

afterAll(async () => {
  await server?.kill9()
  await storage?.release()
}, 30_000)

interface StoredPayment {
  id: string
  accountId: string
  state: 'authorized' | 'declined' | 'captured' | 'voided' | 'lapsed'
  failureCode: string | null
  amount: string
  capturedAmount: string | null
  holdId: string | null
}

const minor = (value: string) => BigInt(value.replace('.', ''))

async function allPayments(send: ReturnType<typeof jsonClient>): Promise<StoredPayment[]> {
  const payments: StoredPayment[] = []
  let after: string | undefined
  for (;;) {
    const page = await send('GET', `/v1/payments?limit=200${after ? `&after=${after}` : ''}`)
    expect(page.status).toBe(200)
    payments.push(...page.body.payments)
    if (!page.body.hasMore) return payments
    after = payments.at(-1)!.id
  }
}

test(`authorizations, captures and voids answered before kill -9 survive restarts; declines and unanswered ones hold nothing (${onPostgres ? 'postgres' : 'embedded on disk'})`, async () => {
  storage = await crashStorage('kassa-payments-crash-')
  const env: Record<string, string> = { OPERATOR_TOKEN, ...storage.env }
  server = await startServerProcess(env)
  const base = () => server!.baseUrl
  const ops = jsonClient(base, OPERATOR_TOKEN)
  const org = (await ops('POST', '/ops/v1/orgs', { name: 'Payments Crash' })).body
  const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
  expect((await ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 10_000_000 })).status).toBe(200)
  const send = jsonClient(base, key)
  const payer = (await send('POST', '/v1/accounts', { externalId: 'payer' })).body.id as string
  // Three units only: most authorizations against it are definite insufficient_available declines.
  const short = (await send('POST', '/v1/accounts', { externalId: 'short' })).body.id as string
  expect((await send('POST', `/v1/sandbox/accounts/${payer}/fund`, { asset: 'USDC', amount: '1000000' })).status).toBe(201)
  expect((await send('POST', `/v1/sandbox/accounts/${short}/fund`, { asset: 'USDC', amount: '3' })).status).toBe(201)
  const funded = new Map([
    [payer, PAYER_FUNDED],
    [short, SHORT_FUNDED],
  ])

  /** Answers the clients saw, by payment id. */
  const authorized = new Map<string, string>()
  const declined = new Set<string>()
  const captured = new Map<string, string>()
  const voided = new Set<string>()
  let unanswered = 0
  const unexpected: Array<{ request: string; status: number; body: unknown }> = []

  for (let round = 0; round < ROUNDS; round++) {
    let killed = false
    let sequence = 0
    const worker = async () => {
      while (!killed) {
        const n = sequence++
        const accountId = n % 5 === 0 ? short : payer
        const amount = `${1 + (n % 3)}.25`
        let answer: Awaited<ReturnType<typeof send>>
        try {
          answer = await send('POST', '/v1/payments/authorize', { accountId, asset: 'USDC', amount, description: `r${round}-${n}` })
        } catch {
          // The server died under this request: its outcome is unknown.
          unanswered += 1
          continue
        }
        if (answer.status !== 201) {
          unexpected.push({ request: 'authorize', status: answer.status, body: answer.body })
          continue
        }
        const payment = answer.body as { id: string; state: string; amount: string }
        if (payment.state !== 'authorized') {
          declined.add(payment.id)
          continue
        }
        authorized.set(payment.id, payment.amount)
        // A third is captured (part of it), a third voided, a third left open.
        if (n % 3 === 2) continue
        const request = n % 3 === 0 ? 'capture' : 'void'
        try {
          answer = await send('POST', `/v1/payments/${payment.id}/${request}`, request === 'capture' ? { amount: '1.1' } : undefined)
        } catch {
          unanswered += 1
          continue
        }
        if (answer.status !== 200) unexpected.push({ request, status: answer.status, body: answer.body })
        else if (request === 'capture') captured.set(payment.id, answer.body.capturedAmount)
        else voided.add(payment.id)
      }
    }
    const answeredBefore = authorized.size + declined.size
    const load = Array.from({ length: WORKERS }, worker)
    await loadUntil(() => authorized.size + declined.size >= answeredBefore + ANSWERS_PER_ROUND_MIN, { minMs: LOAD_BEFORE_KILL_MS, maxMs: 20_000 })
    // Workers stop sending; what is in flight now dies with the server (its outcome is unknown).
    killed = true
    await server.kill9()
    await Promise.all(load)
    server = await startServerProcess(env)

    // Answered: 201 for every authorization, 200 for every capture and void of an authorized payment.
    expect(unexpected).toEqual([])
    const payments = await allPayments(send)
    const byId = new Map(payments.map((payment) => [payment.id, payment]))
    const stateOf = (id: string) => byId.get(id)?.state ?? 'absent'
    // Every authorization answered `authorized` is still there, in a state it can reach from there.
    const lost = [...authorized.keys()].filter((id) => !['authorized', 'captured', 'voided', 'lapsed'].includes(stateOf(id)))
    expect(lost.map((id) => ({ id, state: stateOf(id) }))).toEqual([])
    // Every capture answered is captured, with the amount answered; every void answered is voided.
    expect([...captured].filter(([id, amount]) => stateOf(id) !== 'captured' || byId.get(id)!.capturedAmount !== amount)).toEqual([])
    expect([...voided].filter((id) => stateOf(id) !== 'voided')).toEqual([])
    // An authorization answered `declined` is recorded declined or not at all; never authorized or captured.
    expect([...declined].filter((id) => !['declined', 'absent'].includes(stateOf(id))).map((id) => ({ id, state: stateOf(id) }))).toEqual([])
    // A declined payment cannot be captured, and its hold (if the late write made one) holds nothing.
    for (const payment of payments.filter((entry) => entry.state === 'declined' && entry.holdId !== null)) {
      const capture = await send('POST', `/v1/payments/${payment.id}/capture`, {})
      expect({ id: payment.id, status: capture.status }).toEqual({ id: payment.id, status: 409 })
      expect({ id: payment.id, hold: (await send('GET', `/v1/holds/${payment.holdId}`)).body.state }).toEqual({ id: payment.id, hold: 'released' })
    }
    // Money is exactly what the payments imply: held = open authorizations, gone = captures.
    for (const [accountId, fundedMinor] of funded) {
      const mine = payments.filter((payment) => payment.accountId === accountId)
      const held = mine.filter((payment) => payment.state === 'authorized').reduce((sum, payment) => sum + minor(payment.amount), 0n)
      const spent = mine.filter((payment) => payment.state === 'captured').reduce((sum, payment) => sum + minor(payment.capturedAmount!), 0n)
      const balances = await send('GET', `/v1/accounts/${accountId}/balances`)
      const usdc = balances.body.balances.find((entry: { asset: string }) => entry.asset === 'USDC')
      expect({ accountId, total: minor(usdc.total), available: minor(usdc.available), held: minor(usdc.held) }).toEqual({
        accountId,
        total: fundedMinor - spent,
        available: fundedMinor - spent - held,
        held,
      })
    }
    const report = (await ops('GET', '/ops/v1/ledger/verify')).body
    expect(report.problems).toEqual([])
    expect(report.ok).toBe(true)
    console.log(
      `payments crash round ${round + 1}: answered ${authorized.size} authorized, ${declined.size} declined, ${captured.size} captured, ${voided.size} voided; ${unanswered} unanswered; ${payments.length} payments stored`,
    )
  }
  // The load did real work in every category.
  expect(authorized.size).toBeGreaterThan(ROUNDS * 10)
  expect(unanswered).toBeGreaterThan(0)
  expect(captured.size).toBeGreaterThan(ROUNDS)
  expect(voided.size).toBeGreaterThan(ROUNDS)
  expect(declined.size).toBeGreaterThan(ROUNDS)
}, 180_000)
