import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import { eventRow } from '../../server/modules/events/write-sets.ts'
import { CommitFailedError, IdempotencyKeyTaken, OperationWithdrawn, type LedgerOperation } from '../../server/ledger/writer.ts'
import { FAIL_FAST_MS } from '../../server/ledger/writer-pace.ts'
import { ApiError } from '../../server/lib/errors.ts'
import { countAbove, histogramBetween } from '../../server/lib/histogram.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { onPostgres } from '../support/db.ts'
import { nextTurn } from '../support/eventually.ts'
import { ManualTimers } from '../support/manual-timers.ts'
import { stallWriter } from '../support/writer.ts'
import { expectVerified, faucetCredit, ledgerFixture, type LedgerFixture } from './support.ts'

let app: TestApp
let fx: LedgerFixture
/**
 * The writer's clock and timers, moved by hand: batch latencies, deadlines, the fail-fast window and
 * the stall watch are read on it, so each time rule is asserted at its exact mark, and a batch takes
 * no time unless a test holds it while moving the clock.
 */
const clock = new ManualTimers()

beforeAll(async () => {
  app = await startTestApp({}, { writerClock: clock })
  fx = await ledgerFixture(app, 'Writer Org')
})
afterAll(async () => {
  await app.close()
})

const writer = () => app.kassa.runtime.ledger.writer
const ledger = () => app.kassa.runtime.ledger

/** An operation written as a movement row of its own, found again by its reference. */
type FundingOperation = LedgerOperation & { reference: string }

/** A faucet credit written straight through the ledger, with an event whose id the caller may choose. */
function credit(accountId: string, amountMinor: bigint, extra: Partial<FundingOperation> = {}): FundingOperation {
  return faucetCredit(fx.org.id, accountId, amountMinor, extra)
}

/** A completed idempotency record of this organization for `key`, live for a day. */
function record(key: string) {
  const now = Date.now()
  return {
    orgId: fx.org.id,
    key,
    method: 'POST',
    path: '/v1/test',
    requestHash: 'h',
    requestBody: null,
    state: 'completed' as const,
    responseStatus: 201,
    responseBody: '{}',
    createdAt: new Date(now),
    lockedUntil: new Date(now),
    expiresAt: new Date(now + 86_400_000),
  }
}

async function committedMovements(references: string[]): Promise<number> {
  const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*) as count from ledger_movements where reference in ${references}`)
  return Number(row!.count)
}

/** The messages of an error and its causes, joined. */
function messagesOf(error: unknown): string {
  const messages: string[] = []
  for (let current = error; current instanceof Error; current = current.cause) messages.push(current.message)
  return messages.join(' | ')
}

/**
 * Runs `body` with the writer stalled, and releases it whatever happens: a failed expectation in
 * one test must not leave the writer stalled for every test after it.
 */
function whileStalled<T>(body: () => T): T {
  const release = stallWriter(writer())
  let result: T
  try {
    result = body()
  } catch (error) {
    release()
    throw error
  }
  if (result instanceof Promise) return result.finally(release) as T
  release()
  return result
}

/**
 * Lets the writer's first wait for Postgres settle only once `release` has resolved (by default,
 * once the second's has settled): the first batch's answer comes after the second's, as when its
 * promise has one more async step behind it. The waits after the second go as usual, and nothing
 * counts as overdue meanwhile, so the second batch is pipelined behind the held first. `restore`
 * puts the writer's methods back.
 */
function settleSecondFirst(release?: Promise<void>): { secondAnswered: Promise<void>; restore: () => void } {
  const internals = writer() as unknown as { execute?: (run: () => Promise<unknown>) => Promise<unknown>; overdueAfterMs?: () => number }
  internals.overdueAfterMs = () => Number.POSITIVE_INFINITY
  let secondSettled!: () => void
  const secondAnswered = new Promise<void>((resolve) => (secondSettled = resolve))
  const firstReleased = release ?? secondAnswered
  let calls = 0
  internals.execute = (run) => {
    calls += 1
    const answer = run()
    if (calls === 1) return answer.then((rows) => firstReleased.then(() => rows), (error: unknown) => firstReleased.then(() => Promise.reject(error)))
    if (calls === 2) void answer.finally(secondSettled).catch(() => {})
    return answer
  }
  const restore = () => {
    delete internals.execute
    delete internals.overdueAfterMs
  }
  return { secondAnswered, restore }
}

/**
 * An account holding 5 with an event already in the log, and a credit of 1 repeating that event's
 * id: a batch carrying it fails on the unique index.
 */
async function failingCredit(name: string): Promise<{ account: string; failing: FundingOperation }> {
  const account = await fx.mint(name)
  const taken = eventRow(fx.org.id, 'account.funded', { accountId: account }, new Date())
  await ledger().submit(credit(account, 5_000_000n, { events: [taken] }))
  return { account, failing: credit(account, 1_000_000n, { events: [{ ...taken }] }) }
}

/** Nothing of `operations` landed, the account still holds its 5, and the writer carries on with a fresh guard. */
async function expectNoneLandedThenCarriesOn(account: string, operations: FundingOperation[]): Promise<void> {
  await ledger().drain()
  expect(await committedMovements(operations.map((op) => op.reference))).toBe(0)
  expect(await fx.balance(account)).toMatchObject({ available: '5.000000', total: '5.000000' })
  await ledger().submit(credit(account, 1_000_000n))
  expect(await fx.balance(account)).toMatchObject({ available: '6.000000' })
  await expectVerified(app)
}

/**
 * The writer's next wait for Postgres fails as a lost connection does (nothing of the batch was
 * written); the waits after it go as usual.
 */
function loseConnectionOnce(): void {
  const internals = writer() as unknown as { execute?: (run: () => Promise<unknown>) => Promise<unknown> }
  internals.execute = () => {
    delete internals.execute
    return Promise.reject(Object.assign(new Error('write CONNECTION_CLOSED'), { code: 'CONNECTION_CLOSED' }))
  }
}

const settled = <T>(promise: Promise<T>) => promise.then((value) => ({ ok: true as const, value }), (error: unknown) => ({ ok: false as const, error }))

describe('the pipelined group-commit writer', () => {
  test('a batch is one statement: many operations commit with one round trip each batch, in order', async () => {
    const account = await fx.mint('pipelined')
    const before = writer().committedBatches
    // A pause of this thread between two submits (a collection, on a loaded CI machine) would count
    // as the held batch being overdue, and nothing would be pipelined behind it: that rule has tests
    // of its own; here the batch ahead is never overdue.
    const leisurely = writer() as unknown as { overdueAfterMs?: () => number }
    leisurely.overdueAfterMs = () => Number.POSITIVE_INFINITY
    let commits: Array<Promise<void>>
    try {
      commits = whileStalled(() => {
        const commits = Array.from({ length: 40 }, () => ledger().submit(credit(account, 1_000_000n)))
        // While held: as many batches as the pipeline allows are sent, the rest wait in one queue.
        expect(writer().inFlightCount()).toBe(writer().pipelineDepth)
        return commits
      })
    } finally {
      delete leisurely.overdueAfterMs
    }
    await Promise.all(commits)
    await ledger().drain()
    // Everything queued behind the held batches went in one more batch.
    expect(writer().committedBatches - before).toBe(writer().pipelineDepth + 1)
    expect(await fx.balance(account)).toMatchObject({ available: '40.000000', total: '40.000000' })
    await expectVerified(app)
  })

  test.skipIf(!onPostgres)('answers whose promises settle out of order are handled in the order the batches were sent', async () => {
    // Two answers read from one packet settle in one turn, and a promise with one more async step
    // behind it settles after the other: here the first batch's answer is held back until the
    // second's has settled. Nothing of the second batch is settled before the first.
    const account = await fx.mint('reordered')
    let releaseFirst!: () => void
    const { secondAnswered, restore } = settleSecondFirst(new Promise<void>((resolve) => (releaseFirst = resolve)))
    const resolved: number[] = []
    let commits: Array<Promise<void>>
    try {
      commits = Array.from({ length: 40 }, (_, index) => ledger().submit(credit(account, 1_000_000n)).then(() => void resolved.push(index)))
      expect(writer().inFlightCount()).toBe(2)
      await secondAnswered
      await Bun.sleep(20)
      expect(resolved).toEqual([])
      expect(writer().inFlightCount()).toBe(2)
    } finally {
      restore()
      releaseFirst()
    }
    await Promise.all(commits)
    await ledger().drain()
    expect(resolved).toEqual(Array.from({ length: 40 }, (_, index) => index))
    expect(await fx.balance(account)).toMatchObject({ available: '40.000000', total: '40.000000' })
    await expectVerified(app)
  })

  test.skipIf(!onPostgres)("a failed batch whose answer settles after the next batch's: its operation at fault fails alone, the next batch is sent again and commits", async () => {
    // The first batch fails on the unique index; the second is refused by the order guard, and its
    // answer settles first.
    const { account, failing } = await failingCredit('failedlate')
    const behind = Array.from({ length: 40 }, () => credit(account, 2_000_000n))
    const { secondAnswered, restore } = settleSecondFirst()
    let outcomes: Array<Promise<{ ok: boolean }>>
    try {
      outcomes = [failing, ...behind].map((op) => settled(ledger().submit(op)))
      expect(writer().inFlightCount()).toBe(2)
      await secondAnswered
    } finally {
      restore()
    }
    const [failed, ...rest] = await Promise.all(outcomes)
    expect((failed as { error?: unknown }).error).toBeInstanceOf(CommitFailedError)
    for (const outcome of rest) expect(outcome.ok).toBe(true)
    await ledger().drain()
    expect(await committedMovements([failing.reference])).toBe(0)
    expect(await committedMovements(behind.map((op) => op.reference))).toBe(behind.length)
    expect(await fx.balance(account)).toMatchObject({ available: '85.000000', total: '85.000000' })
    await expectVerified(app)
  })

  test('a batch lost with its connection takes every operation sent or queued after it with it: nothing of them lands', async () => {
    const account = await fx.mint('lost-connection')
    await ledger().submit(credit(account, 5_000_000n))
    const lost = [credit(account, 1_000_000n), ...Array.from({ length: 3 }, () => credit(account, 2_000_000n))]
    loseConnectionOnce()
    for (const outcome of await Promise.all(lost.map((op) => settled(ledger().submit(op))))) {
      expect(outcome.ok).toBe(false)
      expect((outcome as { error: unknown }).error).toBeInstanceOf(CommitFailedError)
    }
    await expectNoneLandedThenCarriesOn(account, lost)
  })

  test('a batch failing on one operation\'s row: the batches sent after it are refused by the order guard, then sent again and commit; only that operation fails', async () => {
    const { account, failing } = await failingCredit('guarded')
    const behind = Array.from({ length: 3 }, () => credit(account, 2_000_000n))
    const { failingCommit, behindCommits } = whileStalled(() => {
      const failingCommit = settled(ledger().submit(failing))
      // Sent behind it while it is in flight (on a pipeline; with PGlite's depth of 1 they queue).
      const behindCommits = behind.map((op) => settled(ledger().submit(op)))
      expect(writer().inFlightCount()).toBe(Math.min(writer().pipelineDepth, 4))
      return { failingCommit, behindCommits }
    })
    const failed = await failingCommit
    expect(failed.ok).toBe(false)
    expect((failed as { error: unknown }).error).toBeInstanceOf(CommitFailedError)
    for (const outcome of await Promise.all(behindCommits)) expect(outcome.ok).toBe(true)
    await ledger().drain()
    expect(await committedMovements([failing.reference])).toBe(0)
    expect(await committedMovements(behind.map((op) => op.reference))).toBe(behind.length)
    expect(await fx.balance(account)).toMatchObject({ available: '11.000000', total: '11.000000' })
    expect(writer().healthy()).toBe(true)
    await expectVerified(app)
  })

  test('rows the database refuses (a duplicate event, a NUL in an event) inside a batch of good ones: the good ones commit, each bad one alone fails', async () => {
    const { account, failing } = await failingCredit('poisoned')
    const nul = credit(account, 3_000_000n, { events: [eventRow(fx.org.id, 'account.funded', { accountId: account, note: 'a\u0000b' }, new Date())] })
    const good = Array.from({ length: 30 }, () => credit(account, 1_000_000n))
    const operations = [...good.slice(0, 10), failing, ...good.slice(10, 20), nul, ...good.slice(20)]
    const { fillers, outcomes } = whileStalled(() => ({
      // Fill the pipeline so the operations after the fillers go together in one batch.
      fillers: Array.from({ length: writer().pipelineDepth }, () => ledger().submit(credit(account, 1n))),
      outcomes: operations.map((op) => settled(ledger().submit(op))),
    }))
    await Promise.all(fillers)
    const answers = await Promise.all(outcomes)
    answers.forEach((outcome, index) => {
      const op = operations[index]
      if (op === failing || op === nul) expect((outcome as { error?: unknown }).error).toBeInstanceOf(CommitFailedError)
      else expect(outcome.ok).toBe(true)
    })
    await ledger().drain()
    expect(await committedMovements([failing.reference, nul.reference])).toBe(0)
    expect(await committedMovements(good.map((op) => op.reference))).toBe(good.length)
    const fillerMinor = BigInt(writer().pipelineDepth)
    expect(ledger().balance(fx.org.id, account, 'USDC')?.available).toBe(5_000_000n + 30_000_000n + fillerMinor)
    expect(writer().healthy()).toBe(true)
    await expectVerified(app)
  })

  test('the database refuses a batch whose predecessor it never saw (the guard is real), and the writer recovers', async () => {
    const account = await fx.mint('out-of-order')
    await ledger().submit(credit(account, 1_000_000n))
    // Move the writer's guard row as if a batch the writer knows nothing of had committed.
    await app.kassa.runtime.db.execute(sql`update ledger_writer_sequences set seq = seq + 7`)
    const refused = credit(account, 2_000_000n)
    const outcome = await settled(ledger().submit(refused))
    expect(outcome.ok).toBe(false)
    expect(messagesOf((outcome as { error: unknown }).error)).toContain('arrived out of order')
    expect(await committedMovements([refused.reference])).toBe(0)
    await ledger().drain()
    await ledger().submit(credit(account, 4_000_000n))
    expect(await fx.balance(account)).toMatchObject({ available: '5.000000', total: '5.000000' })
    await expectVerified(app)
  })

  test('an operation whose idempotency key is already held is left out of its batch in the same statement; the rest commits', async () => {
    const account = await fx.mint('claims')
    await ledger().submit(credit(account, 1_000_000n, { idempotencyRecord: record('held-key') }))
    const winner = credit(account, 2_000_000n, { idempotencyRecord: record('fresh-key') })
    const loser = credit(account, 4_000_000n, { idempotencyRecord: record('held-key') })
    const twice = credit(account, 8_000_000n, { idempotencyRecord: record('fresh-key') })
    const plain = credit(account, 16_000_000n)
    const { fillers, outcomes } = whileStalled(() => ({
      // Fill the pipeline so the four go together in one batch.
      fillers: Array.from({ length: writer().pipelineDepth }, () => ledger().submit(credit(account, 1n))),
      outcomes: [winner, loser, twice, plain].map((op) => settled(ledger().submit(op))),
    }))
    await Promise.all(fillers)
    const [won, lost, second, untouched] = await Promise.all(outcomes)
    expect(won!.ok).toBe(true)
    expect(untouched!.ok).toBe(true)
    expect((lost as { error: unknown }).error).toBeInstanceOf(IdempotencyKeyTaken)
    expect((second as { error: unknown }).error).toBeInstanceOf(IdempotencyKeyTaken)
    expect(await committedMovements([loser.reference, twice.reference])).toBe(0)
    expect(await committedMovements([winner.reference, plain.reference])).toBe(2)
    const fillerMinor = BigInt(writer().pipelineDepth)
    const expected = 1_000_000n + 2_000_000n + 16_000_000n + fillerMinor
    expect(ledger().balance(fx.org.id, account, 'USDC')?.available).toBe(expected)
    await expectVerified(app)
  })

  test('a writer whose batch is stuck or just failed says so (callers with a deadline answer at once), and recovers by itself', async () => {
    const account = await fx.mint('health')
    expect(writer().healthy()).toBe(true)
    const stuck = await whileStalled(async () => {
      const stuck = ledger().submit(credit(account, 1_000_000n))
      // In flight short of the writer's own measure of far longer than batches take: still healthy.
      await clock.advance(Math.floor(writer().stalledAfterMs()) - 1)
      expect(writer().healthy()).toBe(true)
      // From it on, nothing queued now could commit in time.
      await clock.advance(2)
      expect(writer().healthy()).toBe(false)
      expect(writer().expectedWaitMs()).toBe(Number.POSITIVE_INFINITY)
      return { stuck }
    }).then(({ stuck }) => stuck)
    await stuck
    expect(writer().healthy()).toBe(true)
    // A batch lost with its connection: unhealthy at once, healthy again after the next commit.
    loseConnectionOnce()
    expect((await settled(ledger().submit(credit(account, 1_000_000n)))).ok).toBe(false)
    expect(writer().healthy()).toBe(false)
    await ledger().submit(credit(account, 1_000_000n))
    expect(writer().healthy()).toBe(true)
    expect(await fx.balance(account)).toMatchObject({ available: '2.000000' })
  })

  test('once the batch in flight counts as stuck, queued operations with a deadline are withdrawn at once; the rest stay queued', async () => {
    const account = await fx.mint('stuck-watch')
    const release = stallWriter(writer())
    let released = false
    try {
      const stuck = ledger().submit(credit(account, 1_000_000n))
      // Behind the stuck batch (on a pipeline a second batch is out too; these wait behind both).
      const fillers = Array.from({ length: writer().pipelineDepth - 1 }, () => ledger().submit(credit(account, 1_000_000n)))
      // When a batch counts as stuck follows the recent batch latency (150 ms at least).
      const stuckAfterMs = writer().stalledAfterMs()
      const deadlined = settled(ledger().submit(credit(account, 5_000_000n, { deadline: clock.now() + stuckAfterMs + 10_000 })))
      const undated = ledger().submit(credit(account, 2_000_000n))
      expect(writer().pendingCount()).toBe(2)
      await clock.advance(Math.floor(stuckAfterMs) - 1)
      expect(writer().pendingCount()).toBe(2)
      // Long before its own deadline, the operation with one is withdrawn when the stall is noticed.
      await clock.advance(2)
      const outcome = await deadlined
      expect((outcome as { ok: boolean; error?: unknown }).ok).toBe(false)
      expect((outcome as { error?: unknown }).error).toBeInstanceOf(OperationWithdrawn)
      expect(writer().healthy()).toBe(false)
      expect(writer().pendingCount()).toBe(1)
      release()
      released = true
      await Promise.all([stuck, ...fillers, undated])
    } finally {
      if (!released) release()
    }
    // The withdrawn credit moved nothing: 1 for the stuck batch, 1 per filler, 2 for the undated one.
    expect(await fx.balance(account)).toMatchObject({ available: `${1 + (writer().pipelineDepth - 1) + 2}.000000` })
    await expectVerified(app)
  })

  test('after a slow spell, a stuck batch is noticed at its own mark: the watch set at the slow mark is set again earlier', async () => {
    const account = await fx.mint('quickened')
    // A slow batch, then one sent while the pace is slow: the watch is set at that slow mark.
    let release = stallWriter(writer())
    const slow = ledger().submit(credit(account, 1n))
    await clock.advance(2_000)
    release()
    await slow
    const slowMarkMs = writer().stalledAfterMs()
    // Quick batches (they take no time on this clock) bring the pace, and the mark, back down.
    for (let round = 0; round < 20; round++) await ledger().submit(credit(account, 1n))
    const stuckAfterMs = writer().stalledAfterMs()
    expect(stuckAfterMs).toBeLessThan(slowMarkMs / 2)
    release = stallWriter(writer())
    try {
      const stuck = ledger().submit(credit(account, 1n))
      // On a pipeline, batches out behind the stuck one; the deadlined operation waits behind them all.
      const fillers = Array.from({ length: writer().pipelineDepth - 1 }, () => ledger().submit(credit(account, 1n)))
      const deadlined = settled(ledger().submit(credit(account, 5n, { deadline: clock.now() + slowMarkMs * 10 })))
      await clock.advance(Math.floor(stuckAfterMs) - 1)
      expect(writer().pendingCount()).toBe(1)
      await clock.advance(2)
      expect(await deadlined).toMatchObject({ ok: false, error: expect.any(OperationWithdrawn) })
      release()
      await Promise.all([stuck, ...fillers])
    } finally {
      release()
    }
    // The slow one, twenty quick ones, the stuck one and the fillers: not the withdrawn 5.
    expect(await fx.balance(account)).toMatchObject({ available: `0.0000${22 + writer().pipelineDepth - 1}` })
  })

  test('after a failed batch the writer stays unhealthy while memory is read back from Postgres, and for a while after that read fails too', async () => {
    const account = await fx.mint('read-back')
    const internals = writer() as unknown as { readBack(touched: unknown): Promise<void> }
    const realReadBack = internals.readBack
    // The read-back waits (as on a database that refuses, where the driver backs off between its
    // reconnects) and then fails.
    let failReadBack!: () => void
    const readBackHeld = new Promise<void>((resolve) => (failReadBack = resolve))
    let readBackStarted!: () => void
    const started = new Promise<void>((resolve) => (readBackStarted = resolve))
    internals.readBack = async () => {
      readBackStarted()
      await readBackHeld
      throw new Error('connect ECONNREFUSED')
    }
    try {
      await ledger().submit(credit(account, 1_000_000n))
      loseConnectionOnce()
      expect((await settled(ledger().submit(credit(account, 1_000_000n)))).ok).toBe(false)
      await started
      // Longer than the fail-fast window after the failed batch: still unhealthy, the read-back is under way.
      await clock.advance(FAIL_FAST_MS + 50)
      expect(writer().healthy()).toBe(false)
      expect(writer().expectedWaitMs()).toBe(Number.POSITIVE_INFINITY)
      failReadBack()
      await nextTurn()
      // The read failed: the database is failing again, callers keep answering at once for the
      // fail-fast window, and no longer.
      expect(writer().healthy()).toBe(false)
      await clock.advance(FAIL_FAST_MS - 1)
      expect(writer().healthy()).toBe(false)
      await clock.advance(2)
      expect(writer().healthy()).toBe(true)
    } finally {
      internals.readBack = realReadBack
    }
    // A commit shows the database is back.
    await ledger().submit(credit(account, 1_000_000n))
    expect(writer().healthy()).toBe(true)
    expect(await fx.balance(account)).toMatchObject({ available: '2.000000' })
  })

  test('slow batches raise the expected wait while work is queued, but an idle writer expects none (admission never stays shut)', async () => {
    const account = await fx.mint('pace')
    for (let round = 0; round < 6; round++) {
      const release = stallWriter(writer())
      const slow = ledger().submit(credit(account, 1n))
      await clock.advance(120)
      if (round === 5) {
        // A batch in flight and one queued behind it: the estimate reflects the slow batches.
        const queued = ledger().submit(credit(account, 1n))
        expect(writer().expectedWaitMs()).toBeGreaterThan(40)
        release()
        await Promise.all([slow, queued])
      } else {
        release()
        await slow
      }
    }
    await writer().idle()
    expect(writer().healthy()).toBe(true)
    expect(writer().expectedWaitMs()).toBe(0)
  })

  test('after batches slower than a whole budget, an idle writer still sends an operation with a deadline, and the pace recovers', async () => {
    const account = await fx.mint('stale-pace')
    const pace = () => (writer() as unknown as { batchMs: number }).batchMs
    // Slow batches, one at a time (as when the server's thread read their answers late): the recent
    // batch latency ends above the time left to an authorization.
    for (let round = 0; round < 5; round++) {
      const release = stallWriter(writer())
      const slow = ledger().submit(credit(account, 1n))
      await clock.advance(500)
      release()
      await slow
    }
    await writer().idle()
    const stalePace = pace()
    expect(stalePace).toBeGreaterThan(200)
    expect(writer().expectedWaitMs()).toBe(0)
    // Sent at once, not withdrawn for a pace no batch in flight stands for (before, every such
    // operation was withdrawn, nothing was sent, and the stale pace was never measured again).
    const outcome = await settled(ledger().submit(credit(account, 5n, { deadline: clock.now() + 150 })))
    expect(outcome.ok).toBe(true)
    for (let round = 0; round < 20; round++) await ledger().submit(credit(account, 1n))
    // Measured again: the stale figure has all but gone from it (a fixed ceiling would also measure
    // how fast this machine commits right now).
    expect(pace()).toBeLessThan(stalePace / 4)
    expect(await fx.balance(account)).toMatchObject({ available: '0.000030' })
  })

  test('a batch retried after a refused guarded write refuses, not retries, an operation whose key an earlier one of the batch claimed', async () => {
    const account = await fx.mint('guarded-retry')
    const refusal = new ApiError('quote_consumed', 'refused by its guard')
    // Something in flight, so the three below queue and go as one guarded batch.
    const release = stallWriter(writer())
    const filler = ledger().submit(credit(account, 1n))
    const guarded = credit(account, 1_000_000n, { guardedWrites: [{ write: async () => false, refusal: () => refusal }] })
    const first = credit(account, 2_000_000n, { idempotencyRecord: record('retry-key') })
    const second = credit(account, 4_000_000n, { idempotencyRecord: record('retry-key') })
    const outcomes = [guarded, first, second].map((op) => settled(ledger().submit(op)))
    release()
    await filler
    const [refused, won, lost] = await Promise.all(outcomes)
    expect((refused as { error: unknown }).error).toBe(refusal)
    expect(won!.ok).toBe(true)
    expect((lost as { error: unknown }).error).toBeInstanceOf(IdempotencyKeyTaken)
    expect(await committedMovements([guarded.reference, second.reference])).toBe(0)
    expect(ledger().balance(fx.org.id, account, 'USDC')?.available).toBe(2_000_001n)
    await expectVerified(app)
  })

  test('the ops stats count every committed batch in the commit-latency histogram, a held commit in its slow bucket', async () => {
    const account = await fx.mint('commit-latency')
    const before = (await app.ops('GET', '/ops/v1/ledger/stats')).body
    const release = stallWriter(writer())
    const held = ledger().submit(credit(account, 1n))
    await clock.advance(60)
    release()
    await held
    await ledger().submit(credit(account, 1n))
    const after = (await app.ops('GET', '/ops/v1/ledger/stats')).body
    const histogram = histogramBetween(before.commitLatencyMs, after.commitLatencyMs)
    expect(histogram.count).toBe(after.committedBatches - before.committedBatches)
    expect(histogram.count).toBeGreaterThanOrEqual(2)
    // The held batch waited at least 60 ms before Postgres saw it.
    expect(countAbove(histogram, 50)).toBeGreaterThanOrEqual(1)
    expect(after.commitLatencyMs.maxMs).toBeGreaterThanOrEqual(60)
    expect(histogram.buckets.reduce((sum: number, bucket: { count: number }) => sum + bucket.count, 0)).toBe(histogram.count)
  })

  test('the ops stats give the event loop\'s lateness since a moment on the wall clock when asked, and refuse a moment that is not one', async () => {
    const plain = (await app.ops('GET', '/ops/v1/ledger/stats')).body
    expect(plain.eventLoopLagSinceMs).toBeUndefined()
    expect(typeof plain.eventLoopLagMs).toBe('number')
    const blockedFrom = Date.now()
    Bun.sleepSync(120)
    await Bun.sleep(20)
    const since = await app.ops('GET', `/ops/v1/ledger/stats?lagSince=${blockedFrom - 5}`)
    expect(since.status).toBe(200)
    expect(since.body.eventLoopLagSinceMs).toBeGreaterThanOrEqual(100)
    // Asked from after the block, the block is left out, while the recent lag still holds it.
    const after = Date.now()
    await Bun.sleep(20)
    const later = (await app.ops('GET', `/ops/v1/ledger/stats?lagSince=${after}`)).body
    expect(later.eventLoopLagSinceMs).toBeLessThan(since.body.eventLoopLagSinceMs - 50)
    expect(later.eventLoopLagMs).toBeGreaterThanOrEqual(100)
    for (const bad of ['soon', '-1']) {
      const refused = await app.ops('GET', `/ops/v1/ledger/stats?lagSince=${bad}`)
      expect(refused.status).toBe(400)
      expect(refused.body.error.code).toBe('invalid_request')
      expect(refused.body.error.field).toBe('lagSince')
    }
  })

  test('the ops stats count every operation sent in the queue-wait histogram: one queued behind a held batch waits for it', async () => {
    const account = await fx.mint('queue-wait')
    const before = (await app.ops('GET', '/ops/v1/ledger/stats')).body
    const release = stallWriter(writer())
    const first = ledger().submit(credit(account, 1n))
    // The first batch is out (held): the next operations wait for it to commit before they are sent.
    const behind = Array.from({ length: writer().pipelineDepth }, () => ledger().submit(credit(account, 1n)))
    await clock.advance(60)
    release()
    await Promise.all([first, ...behind])
    const after = (await app.ops('GET', '/ops/v1/ledger/stats')).body
    const waits = histogramBetween(before.queueWaitMs, after.queueWaitMs)
    expect(waits.count).toBe(after.committedOperations - before.committedOperations)
    expect(waits.count).toBe(1 + writer().pipelineDepth)
    // The first was sent at once; the last one queued was sent only after the held batch committed.
    expect(countAbove(waits, 50)).toBeGreaterThanOrEqual(1)
    expect(countAbove(waits, 50)).toBeLessThan(waits.count)
    expect(after.queueWaitMs.maxMs).toBeGreaterThanOrEqual(55)
    // Queued to durable, per operation: every one committed is counted, and each waited for the held
    // batch (the first inside it, the rest behind it).
    const durable = histogramBetween(before.durableMs, after.durableMs)
    expect(durable.count).toBe(after.committedOperations - before.committedOperations)
    expect(countAbove(durable, 50)).toBe(durable.count)
    expect(after.durableMs.maxMs).toBeGreaterThanOrEqual(55)
  })
})

// Needs DATABASE_URL: on PGlite the writer sends one batch at a time.
describe('pipelining only batches worth their fixed cost', () => {
  let minApp: TestApp
  let minFx: LedgerFixture
  const minClock = new ManualTimers()

  beforeAll(async () => {
    if (!onPostgres) return
    minApp = await startTestApp({ ledgerPipelineDepth: 2, ledgerPipelineMinOperations: 3 }, { writerClock: minClock })
    minFx = await ledgerFixture(minApp, 'Pipeline Minimum Org')
  })
  afterAll(async () => {
    await minApp?.close()
  })

  /** A credit of 1 on this describe's own organization (`credit` writes to the file's). */
  const minCredit = (account: string): FundingOperation => ({
    ...credit(account, 1_000_000n),
    orgId: minFx.org.id,
    events: [eventRow(minFx.org.id, 'account.funded', { accountId: account }, new Date())],
  })

  test.skipIf(!onPostgres)('behind a batch in flight, fewer operations than the minimum wait for it; the minimum reached, they go out as one more batch', async () => {
    const minWriter = minApp.kassa.runtime.ledger.writer
    const minLedger = minApp.kassa.runtime.ledger
    const account = await minFx.mint('pipeline-minimum')
    const op = () => minCredit(account)
    const before = minWriter.committedBatches
    const release = stallWriter(minWriter)
    const commits = [minLedger.submit(op())]
    expect(minWriter.inFlightCount()).toBe(1)
    // Two waiting: below the minimum of three, they wait for the batch ahead.
    commits.push(minLedger.submit(op()), minLedger.submit(op()))
    expect(minWriter.inFlightCount()).toBe(1)
    expect(minWriter.pendingCount()).toBe(2)
    // The third reaches it: the three go out together, pipelined behind the first.
    commits.push(minLedger.submit(op()))
    expect(minWriter.inFlightCount()).toBe(2)
    expect(minWriter.pendingCount()).toBe(0)
    release()
    await Promise.all(commits)
    expect(minWriter.committedBatches - before).toBe(2)
    expect(minWriter.committedOperations).toBeGreaterThanOrEqual(4)
    expect(await minFx.balance(account)).toMatchObject({ available: '4.000000', total: '4.000000' })
    await expectVerified(minApp)
  })

  test.skipIf(!onPostgres)('behind a batch out far longer than batches take, nothing more is pipelined: it may be stuck, and what waits in the queue can still be withdrawn', async () => {
    const minWriter = minApp.kassa.runtime.ledger.writer
    const minLedger = minApp.kassa.runtime.ledger
    const account = await minFx.mint('pipeline-overdue')
    const op = () => minCredit(account)
    const release = stallWriter(minWriter)
    const commits = [minLedger.submit(op())]
    // Overdue, though not yet counted as stuck, by the writer's own measures.
    await minClock.advance(minWriter.overdueAfterMs() + 1)
    expect(minWriter.overdueAfterMs() + 1).toBeLessThan(minWriter.stalledAfterMs())
    expect(minWriter.healthy()).toBe(true)
    commits.push(minLedger.submit(op()), minLedger.submit(op()), minLedger.submit(op()))
    expect(minWriter.inFlightCount()).toBe(1)
    expect(minWriter.pendingCount()).toBe(3)
    release()
    await Promise.all(commits)
    expect(await minFx.balance(account)).toMatchObject({ available: '4.000000' })
  })

  test.skipIf(!onPostgres)('with nothing in flight, a lone operation is sent at once', async () => {
    const minWriter = minApp.kassa.runtime.ledger.writer
    const account = await minFx.mint('pipeline-lone')
    const release = stallWriter(minWriter)
    const commit = minApp.kassa.runtime.ledger.submit(minCredit(account))
    expect(minWriter.inFlightCount()).toBe(1)
    expect(minWriter.pendingCount()).toBe(0)
    release()
    await commit
  })
})
