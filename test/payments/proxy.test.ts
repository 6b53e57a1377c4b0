import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AUTHORIZATION_BUDGET_MS } from '../../server/modules/payments/state.ts'
import { createTestDatabase, onPostgres, serverUrl, type TestDatabase } from '../support/db.ts'
import { jsonClient, startServerProcess, type ServerProcess } from '../support/server-process.ts'
import { TcpProxy, type ProxyMode } from '../support/tcp-proxy.ts'

const OPERATOR_TOKEN = 'proxy-test-operator-token-0123456789abcdef'
/** Concurrent clients sending authorizations back to back. */
const CLIENTS = 6
/**
 * At most this many authorizations a second across the clients. Unpaced, the stream grew with the
 * machine: declines during the stall come back at once, and on a fast machine 131,000
 * authorizations had to be listed and checked afterwards, past the test's time limit. Paced, every
 * phase still sees thousands of them.
 */
const STREAM_RATE_MAX = 1_200
const CLIENT_INTERVAL_MS = (CLIENTS * 1000) / STREAM_RATE_MAX
const HEALTHY_MS = 1_500
const STALLED_MS = 3_000
const CLOSED_MS = 2_500
/** After the connection comes back, approvals must resume by themselves within this. */
const RECOVERY_LIMIT_MS = 15_000
const AFTER_RECOVERY_MS = 1_000
/**
 * Client-side allowance on top of the server's 500 ms budget, measured from send to response on
 * loopback: the HTTP round trip and event-loop jitter of the test process and of the server on a
 * shared 2-core machine. The assertion is about the budget being kept, not a benchmark.
 */
const CLIENT_ALLOWANCE_MS = 150
/** A request that takes this long has broken the budget for good; the client stops waiting. */
const CLIENT_GIVE_UP_MS = 10_000
const FUNDED = 1_000_000n * 1_000_000n

type Phase = 'healthy' | ProxyMode | 'restored'

interface Answer {
  /** The phase the request was sent in. */
  phase: Phase
  /** The phase its answer arrived in. */
  answeredIn: Phase
  elapsedMs: number
  status: number
  body: any
}

let proxy: TcpProxy | undefined
let server: ServerProcess | undefined
let database: TestDatabase | undefined
let dataDir: string | undefined

afterAll(async () => {
  await server?.stop()
  await proxy?.close()
  await database?.drop()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
}, 30_000)

const minor = (value: string) => BigInt(value.replace('.', ''))

describe('authorization while the database connection fails', () => {
  test.skipIf(!onPostgres)(
    'a stalled and then closed connection to Postgres: every authorization answers within the budget as a decline, and approvals resume by themselves (needs DATABASE_URL)',
    async () => {
      database = await createTestDatabase()
      const upstream = new URL(serverUrl!)
      proxy = await TcpProxy.start(upstream.hostname, Number(upstream.port || 5432))
      dataDir = mkdtempSync(join(tmpdir(), 'kassa-proxy-'))
      server = await startServerProcess({ DATABASE_URL: proxy.rewrite(database.databaseUrl!), OPERATOR_TOKEN, DATA_DIR: dataDir })
      const base = () => server!.baseUrl
      const ops = jsonClient(base, OPERATOR_TOKEN)

      const org = await ops('POST', '/ops/v1/orgs', { name: 'Proxy' })
      expect(org.status).toBe(201)
      const key = org.body.keys.find((entry: { type: string }) => entry.type === 'test').key as string
      expect((await ops('PATCH', `/ops/v1/orgs/${org.body.id}/limits`, { rateLimitPerMinute: 10_000_000 })).status).toBe(200)
      const call = jsonClient(base, key)
      const account = await call('POST', '/v1/accounts', { externalId: 'card-holder' })
      expect(account.status).toBe(201)
      const accountId = account.body.id as string
      expect((await call('POST', `/v1/sandbox/accounts/${accountId}/fund`, { asset: 'USDC', amount: '1000000' })).status).toBe(201)

      let phase: Phase = 'healthy'
      let running = true
      const answers: Answer[] = []
      const failures: string[] = []
      let sequence = 0
      const client = async () => {
        while (running) {
          const sentIn = phase
          const started = performance.now()
          try {
            const response = await fetch(`${base()}/v1/payments/authorize`, {
              method: 'POST',
              headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
              body: JSON.stringify({ accountId, asset: 'USDC', amount: '1', description: `p${sequence++}` }),
              signal: AbortSignal.timeout(CLIENT_GIVE_UP_MS),
            })
            const text = await response.text()
            answers.push({ phase: sentIn, answeredIn: phase, elapsedMs: performance.now() - started, status: response.status, body: text === '' ? undefined : JSON.parse(text) })
          } catch (error) {
            failures.push(`${sentIn}: no answer after ${Math.round(performance.now() - started)} ms: ${String(error)}`)
          }
          const pause = started + CLIENT_INTERVAL_MS - performance.now()
          if (pause > 0) await Bun.sleep(pause)
        }
      }
      // A phase names what the proxy certainly does: an outage phase starts once the proxy has
      // switched, and ends (`restored`) before the proxy forwards again.
      const setPhase = async (next: 'stalled' | 'closed' | 'restored') => {
        if (next === 'restored') {
          phase = next
          await proxy!.setMode('forwarding')
        } else {
          await proxy!.setMode(next)
          phase = next
        }
      }

      const keyedAuthorize = async () => {
        const response = await fetch(`${base()}/v1/payments/authorize`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': 'during-the-outage' },
          body: JSON.stringify({ accountId, asset: 'USDC', amount: '2', description: 'keyed' }),
          signal: AbortSignal.timeout(CLIENT_GIVE_UP_MS),
        })
        return { status: response.status, replayed: response.headers.get('idempotent-replayed'), body: (await response.json()) as any }
      }

      const clients = Array.from({ length: CLIENTS }, client)
      await Bun.sleep(HEALTHY_MS)
      await setPhase('stalled')
      await Bun.sleep(STALLED_MS)
      await setPhase('closed')
      await Bun.sleep(CLOSED_MS / 2)
      // With an Idempotency-Key while the database is away: a retry replays the first answer from
      // memory (its record is not durable yet) instead of being decided again.
      const keyedAnswers = [await keyedAuthorize(), await keyedAuthorize()]
      await Bun.sleep(CLOSED_MS / 2)
      await setPhase('restored')
      const restoredAt = performance.now()
      let recoveredAfterMs: number | undefined
      while (performance.now() - restoredAt < RECOVERY_LIMIT_MS) {
        if (answers.some((answer) => answer.phase === 'restored' && answer.body?.state === 'authorized')) {
          recoveredAfterMs = performance.now() - restoredAt
          break
        }
        await Bun.sleep(20)
      }
      await Bun.sleep(AFTER_RECOVERY_MS)
      running = false
      await Promise.all(clients)

      // Sent and answered while the database was unreachable. (An authorization sent just before
      // the connection comes back may be approved by a commit that lands just after; that is fine.)
      const outage = (value: Phase) => value === 'stalled' || value === 'closed'
      const during = answers.filter((answer) => outage(answer.phase) && outage(answer.answeredIn))
      const summary = (list: Answer[]) => {
        const counts: Record<string, number> = {}
        for (const answer of list) {
          const label = `${answer.status} ${answer.body?.state ?? answer.body?.error?.code} ${answer.body?.failureCode ?? ''}`.trim()
          counts[label] = (counts[label] ?? 0) + 1
        }
        return counts
      }
      const slowest = (list: Answer[]) => Math.round(Math.max(0, ...list.map((answer) => answer.elapsedMs)))
      console.log(
        `proxy test: ${answers.length} authorizations; ` +
          (['healthy', 'stalled', 'closed', 'restored'] as const)
            .map((name) => {
              const list = answers.filter((answer) => answer.phase === name)
              return `${name} ${JSON.stringify(summary(list))} slowest ${slowest(list)} ms`
            })
            .join('; ') +
          `; approvals resumed ${recoveredAfterMs === undefined ? 'never' : `${Math.round(recoveredAfterMs)} ms`} after the connection came back`,
      )

      if (failures.length > 0 || server.child.exitCode !== null) console.log(`server output (the end):\n${server.output().slice(-6_000)}`)
      // Every authorization was answered, none with a server error.
      expect(failures.slice(0, 5)).toEqual([])
      expect(answers.filter((answer) => answer.status >= 500)).toEqual([])
      // The stream ran through the whole outage.
      expect(during.filter((answer) => answer.phase === 'stalled').length).toBeGreaterThan(CLIENTS * 2)
      expect(during.filter((answer) => answer.phase === 'closed').length).toBeGreaterThan(CLIENTS * 2)
      // Sent while the database was unreachable: 201, declined with a processing failure code.
      const notDeclined = during.filter(
        (answer) => answer.status !== 201 || answer.body?.state !== 'declined' || !['processing_timeout', 'processing_error'].includes(answer.body?.failureCode),
      )
      expect(notDeclined).toEqual([])
      // Every answer, in every phase, arrived within the budget (plus the client-side allowance).
      const late = answers.filter((answer) => answer.elapsedMs > AUTHORIZATION_BUDGET_MS + CLIENT_ALLOWANCE_MS)
      expect(late.map((answer) => ({ phase: answer.phase, elapsedMs: Math.round(answer.elapsedMs), state: answer.body?.state }))).toEqual([])
      // Before and after the outage every answer is a 201: approved or declined, never an error.
      expect(answers.filter((answer) => answer.status !== 201)).toEqual([])
      expect(answers.some((answer) => answer.phase === 'healthy' && answer.body.state === 'authorized')).toBe(true)
      // The server recovered by itself, without a restart.
      expect(recoveredAfterMs).toBeDefined()
      expect(server.child.exitCode).toBeNull()

      // Late writes of fail-closed authorizations settle, and the declines answered during the
      // outage are written once the database is back (their writer retries); then the books are checked.
      expect(keyedAnswers.map((answer) => ({ status: answer.status, replayed: answer.replayed, state: answer.body.state }))).toEqual([
        { status: 201, replayed: null, state: 'declined' },
        { status: 201, replayed: 'true', state: 'declined' },
      ])
      expect(keyedAnswers[1]!.body).toEqual(keyedAnswers[0]!.body)
      const payments = await settledPayments(call, accountId, answers.length, new Set([...answers.map((answer) => answer.body.id as string), keyedAnswers[0]!.body.id]))
      // Once the database is back the key's record is durable, and it holds that same answer.
      const keyedLater = await keyedAuthorize()
      expect({ replayed: keyedLater.replayed, body: keyedLater.body }).toEqual({ replayed: 'true', body: keyedAnswers[0]!.body })
      expect(payments.find((payment) => payment.id === keyedAnswers[0]!.body.id)?.state).toBe('declined')
      const byId = new Map(payments.map((payment) => [payment.id, payment]))
      // Every answer is recorded as it was given: an approval as authorized, a decline as declined.
      const unlike = answers.filter((answer) => byId.get(answer.body.id)?.state !== answer.body.state)
      expect(unlike.map((answer) => ({ id: answer.body.id, phase: answer.phase, answered: answer.body.state, stored: byId.get(answer.body.id)?.state ?? 'absent' }))).toEqual([])
      // No declined payment can be captured (this includes the fail-closed ones whose late write landed).
      const declinedWithHold = payments.filter((payment) => payment.state === 'declined' && payment.holdId !== null)
      for (const payment of declinedWithHold) {
        const capture = await call('POST', `/v1/payments/${payment.id}/capture`, {})
        expect({ id: payment.id, status: capture.status, code: capture.body?.error?.code }).toEqual({ id: payment.id, status: 409, code: 'hold_not_active' })
        const hold = await call('GET', `/v1/holds/${payment.holdId}`)
        expect({ id: payment.id, hold: hold.body.state }).toEqual({ id: payment.id, hold: 'released' })
      }
      const held = payments.filter((payment) => payment.state === 'authorized').reduce((sum, payment) => sum + minor(payment.amount), 0n)
      const balances = await call('GET', `/v1/accounts/${accountId}/balances`)
      const usdc = balances.body.balances.find((entry: { asset: string }) => entry.asset === 'USDC')
      expect({ total: minor(usdc.total), available: minor(usdc.available), held: minor(usdc.held) }).toEqual({ total: FUNDED, available: FUNDED - held, held })
      const report = await ops('GET', '/ops/v1/ledger/verify')
      expect(report.body.problems).toEqual([])
      expect(report.body.ok).toBe(true)
    },
    90_000,
  )
})

interface StoredPayment {
  id: string
  state: string
  amount: string
  holdId: string | null
}

async function allPayments(call: ReturnType<typeof jsonClient>, accountId: string): Promise<StoredPayment[]> {
  const payments: StoredPayment[] = []
  let after: string | undefined
  for (;;) {
    const page = await call('GET', `/v1/payments?accountId=${accountId}&limit=200${after ? `&after=${after}` : ''}`)
    expect(page.status).toBe(200)
    payments.push(...page.body.payments)
    if (!page.body.hasMore) return payments
    after = payments.at(-1)!.id
  }
}

/**
 * The payments list once nothing changes any more: a fail-closed authorization's late write and
 * its release land some time after the answer, and declines answered during the outage are written
 * when the database is back. Every answered id listed, and two identical reads a moment apart, mean settled.
 */
async function settledPayments(call: ReturnType<typeof jsonClient>, accountId: string, answered: number, ids: Set<string>): Promise<StoredPayment[]> {
  let previous = ''
  for (let attempt = 0; attempt < 100; attempt++) {
    const payments = await allPayments(call, accountId)
    const balances = await call('GET', `/v1/accounts/${accountId}/balances`)
    const snapshot = JSON.stringify([payments, balances.body])
    if (snapshot === previous && payments.filter((payment) => ids.has(payment.id)).length === ids.size) return payments
    previous = snapshot
    await Bun.sleep(200)
  }
  const listed = new Set((await allPayments(call, accountId)).map((payment) => payment.id))
  throw new Error(`the payments of ${answered} answered authorizations never settled (${[...ids].filter((id) => !listed.has(id)).length} answered ids still not listed)`)
}
