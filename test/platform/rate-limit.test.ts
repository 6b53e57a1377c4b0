import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Value } from '@sinclair/typebox/value'
import { and, eq } from 'drizzle-orm'
import { rateLimitCounters } from '../../db/schema/index.ts'
import { FailOpenRateLimiter, MemoryRateLimiter, RATE_WINDOW_MS, SHARED_STORE_COOLDOWN_MS, type RateLimiter } from '../../server/platform/rate-limit-store.ts'
import { PostgresRateLimiter } from '../../server/platform/rate-limit-postgres.ts'
import { refreshCachedOrg } from '../../server/modules/orgs/repo.ts'
import { ErrorBody } from '../../server/platform/errors.ts'
import { startTestApp, type TestApp, type TestOrg, type TestResponse } from '../support/app.ts'
import { eventually, nextTurn } from '../support/eventually.ts'
import { ManualTimers } from '../support/manual-timers.ts'

/**
 * The app runs on a wall clock the test moves by hand, so a 60-second window never ends in the
 * middle of a test and window ends can be asserted exactly.
 */
const WINDOW_START_MS = Math.floor(Date.now() / RATE_WINDOW_MS) * RATE_WINDOW_MS + RATE_WINDOW_MS
let wallNowMs = WINDOW_START_MS + 15_000
let app: TestApp

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => wallNowMs })
})
afterAll(async () => {
  await app.close()
})

/** Moves the wall clock to `secondsIntoWindow` seconds into a window that no test has used yet. */
let windowsUsed = 0
function enterFreshWindow(secondsIntoWindow = 15): void {
  windowsUsed += 1
  wallNowMs = WINDOW_START_MS + windowsUsed * RATE_WINDOW_MS + secondsIntoWindow * 1000
}

async function burst(count: number, send: () => Promise<TestResponse>): Promise<TestResponse[]> {
  const responses: TestResponse[] = []
  // In order, so Remaining counts down predictably; concurrency is the other test file's subject.
  for (let index = 0; index < count; index += 1) responses.push(await send())
  return responses
}

function expectRateHeaders(response: TestResponse, limit: number): void {
  expect(response.headers.get('x-ratelimit-limit')).toBe(String(limit))
  expect(response.headers.get('x-ratelimit-remaining')).toMatch(/^\d+$/)
}

function expectRateLimited(response: TestResponse, limit: number): void {
  expect(response.status).toBe(429)
  expect(response.body.error.code).toBe('rate_limited')
  expect(response.headers.get('retry-after')).toMatch(/^[1-9]\d*$/)
  expect(response.headers.get('x-ratelimit-limit')).toBe(String(limit))
  expect(response.headers.get('x-ratelimit-remaining')).toBe('0')
  // Answered by the rate-limit hook itself, in the same shape as every error.
  expect(Value.Check(ErrorBody, response.body)).toBe(true)
  expect(response.headers.get('content-type')).toBe('application/json')
  expect(response.headers.get('x-request-id')).toBe(response.body.error.requestId)
}

describe('rate limits per key and per source', () => {
  let org: TestOrg

  beforeAll(async () => {
    org = await app.createOrg('Limits Org')
  })

  test('a test key gets exactly 1000 requests a minute, then 429 with Retry-After', async () => {
    enterFreshWindow()
    const responses = await burst(1000, () => app.call('GET', '/v1/sandbox/clock', { key: org.testKey }))
    expect(responses.every((response) => response.status === 200)).toBe(true)
    expectRateHeaders(responses[0]!, 1000)
    expect(responses[0]!.headers.get('x-ratelimit-remaining')).toBe('999')
    expect(responses[999]!.headers.get('x-ratelimit-remaining')).toBe('0')
    const refused = await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })
    expectRateLimited(refused, 1000)
    // 15 seconds into the window: 45 seconds remain.
    expect(refused.headers.get('retry-after')).toBe('45')
  })

  test('the count starts again in the next 60-second window', async () => {
    enterFreshWindow(59)
    await burst(1000, () => app.call('GET', '/v1/sandbox/clock', { key: org.testKey }))
    const refused = await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })
    expectRateLimited(refused, 1000)
    expect(refused.headers.get('retry-after')).toBe('1')
    wallNowMs += 1000
    const admitted = await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })
    expect(admitted.status).toBe(200)
    expect(admitted.headers.get('x-ratelimit-remaining')).toBe('999')
  })

  test('a publishable key gets exactly 100 requests a minute', async () => {
    enterFreshWindow()
    const responses = await burst(100, () => app.call('GET', '/v1/assets', { key: org.publishableKey }))
    expect(responses.every((response) => response.status === 200)).toBe(true)
    expectRateHeaders(responses[0]!, 100)
    expectRateLimited(await app.call('GET', '/v1/assets', { key: org.publishableKey }), 100)
    // The test key has its own count.
    expect((await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })).status).toBe(200)
  })

  test('without a key, 30 requests a minute per source address', async () => {
    enterFreshWindow()
    const responses = await burst(30, () => app.call('GET', '/v1/assets'))
    expect(responses.every((response) => response.status === 200)).toBe(true)
    expectRateHeaders(responses[0]!, 30)
    expect(responses[29]!.headers.get('x-ratelimit-remaining')).toBe('0')
    expectRateLimited(await app.call('GET', '/v1/assets'), 30)
    // A caller with a key is not held to the anonymous count of its address.
    expect((await app.call('GET', '/v1/assets', { key: org.publishableKey })).status).toBe(200)
  })

  test('requests with a bad key count against the anonymous limit of the address, so keys cannot be guessed freely', async () => {
    enterFreshWindow()
    const guesses = await burst(30, () => app.call('GET', '/v1/accounts', { key: `svc_test_${'A'.repeat(32)}` }))
    expect(guesses.every((response) => response.status === 401)).toBe(true)
    expectRateHeaders(guesses[0]!, 30)
    expectRateLimited(await app.call('GET', '/v1/accounts', { key: `svc_test_${'B'.repeat(32)}` }), 30)
  })

  test('every /v1 answer carries the rate headers, whatever its status', async () => {
    enterFreshWindow()
    const answers = {
      ok: await app.call('GET', '/v1/accounts', { key: org.testKey }),
      created: await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'rate-headers' } }),
      invalid: await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: '' } }),
      forbidden: await app.call('GET', '/v1/accounts', { key: org.publishableKey }),
      missing: await app.call('GET', '/v1/accounts/acct_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f', { key: org.testKey }),
      noRoute: await app.call('GET', '/v1/no-such-route', { key: org.testKey }),
      unauthenticated: await app.call('GET', '/v1/accounts'),
    }
    expect(Object.fromEntries(Object.entries(answers).map(([name, response]) => [name, response.status]))).toEqual({
      ok: 200,
      created: 201,
      invalid: 400,
      forbidden: 403,
      missing: 404,
      noRoute: 404,
      unauthenticated: 401,
    })
    for (const response of Object.values(answers)) {
      expect(response.headers.get('x-ratelimit-limit')).toMatch(/^\d+$/)
      expect(response.headers.get('x-ratelimit-remaining')).toMatch(/^\d+$/)
    }
  })

  test('advancing the organization clock in sandbox does not reset its rate window', async () => {
    const clockOrg = await app.createOrg('Clock Limits Org')
    expect((await app.ops('PATCH', `/ops/v1/orgs/${clockOrg.id}/limits`, { rateLimitPerMinute: 3 })).status).toBe(200)
    enterFreshWindow()
    const advanced = await app.call('POST', '/v1/sandbox/clock/advance', { key: clockOrg.testKey, body: { seconds: 3600 } })
    expect(advanced.status).toBe(200)
    await burst(2, () => app.call('GET', '/v1/sandbox/clock', { key: clockOrg.testKey }))
    expectRateLimited(await app.call('GET', '/v1/sandbox/clock', { key: clockOrg.testKey }), 3)
  })
})

describe('operator limits', () => {
  test("raising an organization's limit takes effect on the next request", async () => {
    const org = await app.createOrg('Raised Org')
    enterFreshWindow()
    await burst(1000, () => app.call('GET', '/v1/sandbox/clock', { key: org.testKey }))
    expectRateLimited(await app.call('GET', '/v1/sandbox/clock', { key: org.testKey }), 1000)
    const raised = await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 1005 })
    expect(raised.status).toBe(200)
    expect(raised.body.rateLimitPerMinute).toBe(1005)
    // 1001 requests were counted so far (the refused one counts too): 4 more fit under 1005.
    const more = await burst(4, () => app.call('GET', '/v1/sandbox/clock', { key: org.testKey }))
    expect(more.map((response) => response.status)).toEqual([200, 200, 200, 200])
    expect(more[0]!.headers.get('x-ratelimit-limit')).toBe('1005')
    expectRateLimited(await app.call('GET', '/v1/sandbox/clock', { key: org.testKey }), 1005)
  })

  test('restoring the default (null) brings back 1000', async () => {
    const org = await app.createOrg('Restored Org')
    await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 5000 })
    enterFreshWindow()
    expect((await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })).headers.get('x-ratelimit-limit')).toBe('5000')
    const restored = await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: null })
    expect(restored.body.rateLimitPerMinute).toBe(1000)
    expect((await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })).headers.get('x-ratelimit-limit')).toBe('1000')
  })

  test('a row read before a later change committed, answering after it, does not bring the older limit back', async () => {
    const org = await app.createOrg('Crossing Refresh Org')
    await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 5000 })
    const first = app.kassa.runtime.keys.org(org.id)!
    await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 2000 })
    // What a refresh for the first change hands the cache when its read answers last (this
    // instance refreshes on its own NOTIFY too): the row as the first change left it.
    app.kassa.runtime.keys.upsertOrg(first)
    enterFreshWindow()
    expect((await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })).headers.get('x-ratelimit-limit')).toBe('2000')
    // A refresh that reads the row now keeps it.
    await refreshCachedOrg(app.kassa.runtime.db, app.kassa.runtime.keys, org.id)
    expect(app.kassa.runtime.keys.org(org.id)).toMatchObject({ rateLimitPerMinute: 2000, limitsVersion: 2 })
  })

  test('the raised limit does not apply to publishable keys', async () => {
    const org = await app.createOrg('Raised Publishable Org')
    await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 5000 })
    enterFreshWindow()
    expect((await app.call('GET', '/v1/assets', { key: org.publishableKey })).headers.get('x-ratelimit-limit')).toBe('100')
  })

  test.each([[0], [-1], [1.5], [true]])('refuses a limit of %p naming rateLimitPerMinute', async (value) => {
    const org = await app.createOrg('Bad Limit Org')
    const response = await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: value })
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe('rateLimitPerMinute')
  })
})

describe('counter stores', () => {
  const stores: Array<[string, () => RateLimiter]> = [
    ['in memory', () => new MemoryRateLimiter()],
    ['in the database', () => new PostgresRateLimiter(app.kassa.runtime.db)],
  ]

  test.each(stores)('%s: of 100 concurrent hits with a limit of 40, exactly 40 pass, each with its own Remaining', async (_name, make) => {
    const store = make()
    const bucket = `test:${Math.random().toString(36).slice(2)}`
    const nowMs = WINDOW_START_MS + 5_000
    const decisions = await Promise.all(Array.from({ length: 100 }, () => store.hit(bucket, 40, nowMs)))
    const admitted = decisions.filter((decision) => decision.allowed)
    expect(admitted).toHaveLength(40)
    expect(admitted.map((decision) => decision.remaining).sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, index) => index))
    expect(decisions.filter((decision) => !decision.allowed).every((decision) => decision.remaining === 0)).toBe(true)
    expect(decisions[0]!.retryAfterSeconds).toBe(55)
  })

  test.each(stores)('%s: a new window starts a new count and buckets are separate', async (_name, make) => {
    const store = make()
    const bucket = `test:${Math.random().toString(36).slice(2)}`
    const nowMs = WINDOW_START_MS + 59_999
    expect((await store.hit(bucket, 1, nowMs)).allowed).toBe(true)
    expect((await store.hit(bucket, 1, nowMs)).allowed).toBe(false)
    expect((await store.hit(`${bucket}:other`, 1, nowMs)).allowed).toBe(true)
    const next = await store.hit(bucket, 1, nowMs + 1)
    expect(next.allowed).toBe(true)
    expect(next.retryAfterSeconds).toBe(60)
  })
})

/** The answer if it is already there (nothing more than a turn of the loop to wait), else 'pending'. */
const rightAway = <T>(promise: Promise<T>) => Promise.race([promise, nextTurn().then(() => 'pending' as const)])

describe('the shared counter', () => {
  test('concurrent hits are counted in few statements, and hits of two windows and two buckets in one batch each get their own count', async () => {
    const store = new PostgresRateLimiter(app.kassa.runtime.db)
    const bucket = `test:${Math.random().toString(36).slice(2)}`
    const nowMs = WINDOW_START_MS + 5_000
    const decisions = await Promise.all([
      ...Array.from({ length: 30 }, () => store.hit(bucket, 20, nowMs)),
      ...Array.from({ length: 30 }, () => store.hit(`${bucket}:b`, 25, nowMs)),
      ...Array.from({ length: 5 }, () => store.hit(bucket, 20, nowMs + RATE_WINDOW_MS)),
    ])
    expect(decisions.slice(0, 30).filter((decision) => decision.allowed)).toHaveLength(20)
    expect(decisions.slice(30, 60).filter((decision) => decision.allowed)).toHaveLength(25)
    expect(decisions.slice(60).every((decision) => decision.allowed)).toBe(true)
    expect(decisions.slice(60).map((decision) => decision.remaining).sort((a, b) => a - b)).toEqual([15, 16, 17, 18, 19])
  })

  test('a request that cannot wait is counted in memory when the database does not answer in time', async () => {
    const db = app.kassa.runtime.db
    const bucket = `test:${Math.random().toString(36).slice(2)}`
    const nowMs = WINDOW_START_MS + 5_000
    // A transaction that has inserted the counter row and stays open: the counter's upsert waits
    // on it for real (a row lock on Postgres; the single connection on PGlite).
    let openGate!: () => void
    const gate = new Promise<void>((resolve) => (openGate = resolve))
    let locked!: () => void
    const isLocked = new Promise<void>((resolve) => (locked = resolve))
    const holder = db.transaction(async (tx) => {
      await tx.insert(rateLimitCounters).values({ bucket, windowStartMs: nowMs - (nowMs % RATE_WINDOW_MS), count: 0 })
      locked()
      await gate
    })
    await isLocked
    // Each request's wait runs on a clock moved by hand.
    const clock = new ManualTimers()
    const store = new FailOpenRateLimiter(new PostgresRateLimiter(db), SHARED_STORE_COOLDOWN_MS, clock)
    const logged: unknown[][] = []
    const logError = console.error
    try {
      console.error = (...args: unknown[]) => logged.push(args)
      const waiting = Promise.all(Array.from({ length: 3 }, () => store.hit(bucket, 4, nowMs, { waitMs: 50 })))
      // Answered when their wait is over, the counter still held.
      await clock.advance(50)
      const first = await waiting
      console.error = logError
      expect(first.map((decision) => decision.allowed)).toEqual([true, true, true])
      // Three requests timed out on the counter together: at most one line (none if another test
      // of this process logged the same failure within the last second), not one per request.
      expect(logged.filter((args) => String(args[0]).includes('the shared counter did not answer')).length).toBeLessThanOrEqual(1)
      // Once the counter is known to be stuck, later requests do not wait for it at all; the
      // memory count carries on within the same window and still refuses past the limit.
      const later = await rightAway(Promise.all(Array.from({ length: 3 }, () => store.hit(bucket, 4, nowMs, { waitMs: 50 }))))
      expect(later === 'pending' ? later : later.map((decision) => decision.allowed)).toEqual([true, false, false])
    } finally {
      console.error = logError
      openGate()
      await holder
    }
  })

  test('after the cooldown no request waits to learn whether the database is back: a probe goes out in the background, and once it is answered requests use the shared counter again', async () => {
    const db = app.kassa.runtime.db
    const bucket = `test:${Math.random().toString(36).slice(2)}`
    const nowMs = WINDOW_START_MS + 5_000
    const windowStartMs = nowMs - (nowMs % RATE_WINDOW_MS)
    let openGate!: () => void
    const gate = new Promise<void>((resolve) => (openGate = resolve))
    let locked!: () => void
    const isLocked = new Promise<void>((resolve) => (locked = resolve))
    const holder = db.transaction(async (tx) => {
      await tx.insert(rateLimitCounters).values({ bucket, windowStartMs, count: 0 })
      locked()
      await gate
    })
    await isLocked
    // The store's cooldown and each request's wait run on a clock moved by hand.
    const clock = new ManualTimers()
    const store = new FailOpenRateLimiter(new PostgresRateLimiter(db), SHARED_STORE_COOLDOWN_MS, clock)
    const logError = console.error
    let released = false
    try {
      console.error = () => {}
      // The counter does not answer: the first request fails open after its wait and trips the store.
      expect(store.failingOpen).toBe(false)
      const tripping = store.hit(bucket, 100, nowMs, { waitMs: 30 })
      await clock.advance(29)
      expect(await rightAway(tripping)).toBe('pending')
      await clock.advance(1)
      expect((await tripping).allowed).toBe(true)
      expect(store.failingOpen).toBe(true)
      await clock.advance(SHARED_STORE_COOLDOWN_MS)
      // The cooldown is over and the counter is still held. A request that would wait ten seconds
      // for it is answered from memory at once; its hit is the probe, out in the background.
      expect(await rightAway(store.hit(bucket, 100, nowMs, { waitMs: 10_000 }))).toMatchObject({ allowed: true })
      // So is the next one: one probe at a time, and nothing else waits on the counter.
      expect(await rightAway(store.hit(bucket, 100, nowMs, { waitMs: 10_000 }))).toMatchObject({ allowed: true })
      expect(store.failingOpen).toBe(true)
      openGate()
      await holder
      released = true
      // The probe's hit lands once the counter is free (it waited its own 10 s at most): the store is
      // back on the shared counter, and a request is counted there.
      const countOf = async () => {
        const [row] = await db.select().from(rateLimitCounters).where(and(eq(rateLimitCounters.bucket, bucket), eq(rateLimitCounters.windowStartMs, windowStartMs)))
        return Number(row?.count ?? 0)
      }
      // Two positions: the first request's hit, which went on waiting after its request failed open,
      // and the probe's. (Both requests were counted in memory too: the shared count errs on refusing.)
      await eventually(() => !store.failingOpen, { what: 'the store to stop failing open', timeoutMs: 4_000, intervalMs: 20 })
      const probed = await countOf()
      expect(probed).toBe(2)
      expect((await store.hit(bucket, 100, nowMs, { waitMs: 10_000 })).allowed).toBe(true)
      expect(await countOf()).toBe(probed + 1)
    } finally {
      console.error = logError
      if (!released) {
        openGate()
        await holder
      }
    }
  })
})
