/**
 * What an uncaptured authorization keeps in the server's memory. Figures only: nothing here passes
 * or fails.
 *
 * An authorized payment stays in memory until it is captured, voided or expires (24 h), as its
 * pending hold, which the hot balances reserve against and which names the payment that owns it
 * (capture, void and the expiry sweep read the payment's row from Postgres). This builds the app in process on a throwaway Postgres database (DATABASE_URL, or
 * the local default), authorizes AUTHMEM_COUNT payments (default 40,000) over 64 funded accounts
 * through `app.handle`, and prints the JavaScript heap (`bun:jsc` heapStats, after a full garbage
 * collection) before and after: bytes and objects per uncaptured authorization, and how long a
 * full collection takes (`Bun.gc(true)`, the median of three) before and after.
 *
 *   ./node_modules/.bin/bun bench/authorize-memory.ts
 */
import { heapStats } from 'bun:jsc'
import { createApp } from '../server/app.ts'
import { configForTests } from '../test/support/config.ts'
import { createBenchDatabase } from './support.ts'

const COUNT = Number(process.env.AUTHMEM_COUNT ?? 40_000)
const ACCOUNTS = 64
const CONCURRENCY = 64
const BASE = 'http://kassa.bench'

const database = await createBenchDatabase('authmem')
const kassa = await createApp(configForTests({ databaseUrl: database.url, rateLimitStore: 'memory', webhookDelivery: false }))
const { app } = kassa
const call = async (path: string, token: string, body: unknown, method = 'POST') =>
  (await app.handle(new Request(`${BASE}${path}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }))).json() as Promise<any>

const org = await call('/ops/v1/orgs', kassa.runtime.operatorToken, { name: 'Memory' })
const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
await call(`/ops/v1/orgs/${org.id}/limits`, kassa.runtime.operatorToken, { rateLimitPerMinute: 10_000_000 }, 'PATCH')
const accounts: string[] = []
for (let index = 0; index < ACCOUNTS; index++) {
  const account = await call('/v1/accounts', key, { externalId: `memory-${index}` })
  await call(`/v1/sandbox/accounts/${account.id}/fund`, key, { asset: 'USDC', amount: '1000000' })
  accounts.push(account.id)
}

async function authorize(count: number): Promise<void> {
  let next = 0
  let approved = 0
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) {
        const index = next++
        const answer = await call('/v1/payments/authorize', key, { accountId: accounts[index % ACCOUNTS], asset: 'USDC', amount: '1.25', merchant: { name: 'Coffee', mcc: '5814' } })
        if (answer.state === 'authorized') approved += 1
      }
    }),
  )
  await kassa.runtime.ledger.drain()
  if (approved !== count) throw new Error(`${count - approved} of ${count} authorizations were not approved`)
}

async function settledHeap(): Promise<{ heapSize: number; objectCount: number; fullCollectionMs: number }> {
  Bun.gc(true)
  await Bun.sleep(200)
  Bun.gc(true)
  const { heapSize, objectCount } = heapStats()
  const times = [0, 1, 2].map(() => {
    const started = performance.now()
    Bun.gc(true)
    return performance.now() - started
  })
  return { heapSize, objectCount, fullCollectionMs: times.sort((a, b) => a - b)[1]! }
}

// A first round warms the code and the caches, so the measured round adds only what it keeps.
await authorize(2_000)
const before = await settledHeap()
await authorize(COUNT)
const after = await settledHeap()
await kassa.close()
await database.drop()

const figures = {
  uncapturedAuthorizations: COUNT,
  heapBeforeMb: Math.round(before.heapSize / 1e5) / 10,
  heapAfterMb: Math.round(after.heapSize / 1e5) / 10,
  bytesPerAuthorization: Math.round((after.heapSize - before.heapSize) / COUNT),
  objectsPerAuthorization: Math.round(((after.objectCount - before.objectCount) / COUNT) * 10) / 10,
  fullCollectionMsBefore: Math.round(before.fullCollectionMs * 100) / 100,
  fullCollectionMsAfter: Math.round(after.fullCollectionMs * 100) / 100,
}
console.log(JSON.stringify(figures, null, 2))
