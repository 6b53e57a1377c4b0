import type { BatchTiming } from '../../ledger/writer.ts'
import { assert } from '../../lib/assert.ts'
import { invalid } from '../../lib/errors.ts'
import { roundTo } from '../../lib/histogram.ts'
import { hexWord } from '../../lib/ids.ts'
import { pageLimit } from '../../lib/pagination.ts'
import type { SlowLog, SlowLogCodec } from '../../lib/slow-log.ts'
import { FAILURE_CODES, type FailureCode } from './model.ts'

/**
 * The slow-authorization log: what it keeps of an authorization slower than
 * SLOW_AUTHORIZATION_MS, how it packs that into numbers, and its pages (`GET /ops/v1/payments/slow`).
 */

/** What is known of one authorization when it is answered, beyond its latency. */
export interface AuthorizationTrace {
  paymentId: string | null
  failureCode: FailureCode | null
  /** Its commit, for an approval the writer committed: the batch's times, and when it was queued. */
  batch: BatchTiming | undefined
  queuedAt: number
}

/**
 * One authorization slower than the threshold, as `GET /ops/v1/payments/slow` gives it. Times are
 * milliseconds; `arrivedAtMs` is wall-clock (Unix epoch, fractional), so a caller can set it beside
 * its own clock on the same machine.
 */
export interface SlowAuthorization {
  paymentId: string | null
  state: 'authorized' | 'declined' | 'replayed'
  failureCode: FailureCode | null
  arrivedAtMs: number
  totalMs: number
  /** For an approval committed by the writer: where its time went, adding up to `totalMs`; null otherwise. */
  phases: { beforeWriterMs: number; queuedMs: number; commitMs: number; afterCommitMs: number } | null
  /** Operations in its batch, and batches in flight ahead of that batch when it was sent. */
  batchOperations: number | null
  batchesAhead: number | null
}

const SLOW_STATES = ['authorized', 'declined', 'replayed'] as const

/**
 * A slow authorization as 14 numbers (see `SlowLogCodec`): its payment's id as the four 32-bit words
 * of its UUID, its state and failure code by their place in their lists, and its times and batch;
 * NaN for null. A payment's id is always `pay_` and 32 hex digits (`newId`).
 */
export const SLOW_AUTHORIZATION_CODEC: SlowLogCodec<SlowAuthorization> = {
  width: 14,
  write(entry, into, at) {
    const id = entry.paymentId
    assert(id === null || (id.length === 36 && id.startsWith('pay_')), `a payment id of our form, not ${id}`)
    for (let word = 0; word < 4; word++) {
      const value = id === null ? Number.NaN : hexWord(id, 4 + word * 8)
      assert(value !== -1, `a payment id of our form, not ${id}`)
      into[at + word] = value
    }
    into[at + 4] = SLOW_STATES.indexOf(entry.state)
    into[at + 5] = entry.failureCode === null ? Number.NaN : FAILURE_CODES.indexOf(entry.failureCode)
    into[at + 6] = entry.arrivedAtMs
    into[at + 7] = entry.totalMs
    const phases = entry.phases
    into[at + 8] = phases === null ? Number.NaN : phases.beforeWriterMs
    into[at + 9] = phases === null ? Number.NaN : phases.queuedMs
    into[at + 10] = phases === null ? Number.NaN : phases.commitMs
    into[at + 11] = phases === null ? Number.NaN : phases.afterCommitMs
    into[at + 12] = entry.batchOperations ?? Number.NaN
    into[at + 13] = entry.batchesAhead ?? Number.NaN
  },
  read(from, at) {
    const nullable = (value: number) => (Number.isNaN(value) ? null : value)
    let paymentId: string | null = null
    if (!Number.isNaN(from[at]!)) {
      paymentId = 'pay_'
      for (let word = 0; word < 4; word++) paymentId += from[at + word]!.toString(16).padStart(8, '0')
    }
    return {
      paymentId,
      state: SLOW_STATES[from[at + 4]!]!,
      failureCode: Number.isNaN(from[at + 5]!) ? null : FAILURE_CODES[from[at + 5]!]!,
      arrivedAtMs: from[at + 6]!,
      totalMs: from[at + 7]!,
      phases: Number.isNaN(from[at + 8]!) ? null : { beforeWriterMs: from[at + 8]!, queuedMs: from[at + 9]!, commitMs: from[at + 10]!, afterCommitMs: from[at + 11]! },
      batchOperations: nullable(from[at + 12]!),
      batchesAhead: nullable(from[at + 13]!),
    }
  },
}

/** The log's entry for an authorization answered at `answeredAt`; `replayed`: its answer replayed a key's saved answer. */
export function slowEntry(trace: AuthorizationTrace, replayed: boolean, receivedAt: number, answeredAt: number): SlowAuthorization {
  const batch = trace.batch
  const round = (ms: number) => roundTo(ms, 3)
  return {
    paymentId: replayed ? null : trace.paymentId,
    state: replayed ? 'replayed' : trace.failureCode === null ? 'authorized' : 'declined',
    failureCode: replayed ? null : trace.failureCode,
    arrivedAtMs: round(performance.timeOrigin + receivedAt),
    totalMs: round(answeredAt - receivedAt),
    phases:
      batch === undefined || replayed || trace.failureCode !== null
        ? null
        : {
            beforeWriterMs: round(trace.queuedAt - receivedAt),
            queuedMs: round(batch.sentAt - trace.queuedAt),
            commitMs: round(batch.committedAt - batch.sentAt),
            afterCommitMs: round(answeredAt - batch.committedAt),
          },
    batchOperations: batch?.operations ?? null,
    batchesAhead: batch?.behind ?? null,
  }
}

/** A page of the slow-authorization log: 100 entries when `limit` is left out, at most 1,000. */
export const SLOW_PAGE_DEFAULT = 100
export const SLOW_PAGE_MAX = 1000

/**
 * A page of this instance's authorizations slower than `SLOW_AUTHORIZATION_MS` (from arrival to
 * answer), oldest first, each numbered in the order they were recorded (`seq`, from 1), with where
 * each approval's time went: before the ledger writer had it (rate limiting, authentication,
 * parsing, the decision), waiting in its queue for the batch ahead, its batch's commit, and after
 * the commit until answered. Those after `after` (a `seq`; the last one of a page reads the next),
 * or without it the newest. A page, never the whole log: the server's one thread builds the answer,
 * and the log read whole (the benchmark's 131,072 entries) held it for up to 633 ms, longer than an
 * authorization's budget.
 */
export function slowAuthorizations(
  log: SlowLog<SlowAuthorization>,
  query: { after?: number; limit?: number },
): { thresholdMs: number; recorded: number; kept: number; missed: number; hasMore: boolean; authorizations: Array<SlowAuthorization & { seq: number }> } {
  const limit = pageLimit(query.limit, { fallback: SLOW_PAGE_DEFAULT, max: SLOW_PAGE_MAX })
  const after = query.after
  if (after !== undefined && (!Number.isSafeInteger(after) || after < 0 || after > log.recorded)) {
    throw invalid('after', `after must be a whole number from 0 to ${log.recorded}, the slow authorizations this instance has recorded since it started`)
  }
  const page = log.page(after, limit)
  return {
    thresholdMs: log.thresholdMs,
    recorded: log.recorded,
    kept: log.recorded - log.oldestKept + 1,
    missed: page.missed,
    hasMore: page.hasMore,
    authorizations: page.entries.map(({ seq, entry }) => ({ seq, ...entry })),
  }
}
