import { and, asc, eq, gt, inArray, type SQL } from 'drizzle-orm'
import { queryText, type Executor } from '../../../db/client.ts'
import { events, payments } from '../../../db/schema/index.ts'
import type { EventRow } from '../events/write-sets.ts'
import type { PaymentRow } from './write-sets.ts'
import type { PaymentState } from './model.ts'
import { insertFromJson, jsonParameter, jsonStatement, upsertTail, type TextStatement } from '../../../db/bulk.ts'
import { claimParts, NOT_LOST, recordId, type IdempotencyRow } from '../../platform/idempotency.ts'
import { logFailure } from '../../lib/log.ts'
import { PROCESS_CLOCK_KEEPING_ALIVE, within, type MonotonicClock } from '../../lib/monotonic-clock.ts'

export type PaymentRecord = typeof payments.$inferSelect

export async function findPayment(executor: Executor, orgId: string, id: string): Promise<PaymentRecord | undefined> {
  const [row] = await executor.select().from(payments).where(and(eq(payments.orgId, orgId), eq(payments.id, id)))
  return row
}

export async function listPayments(executor: Executor, orgId: string, filter: { accountId?: string; state?: PaymentState; after?: string; limit: number }): Promise<PaymentRecord[]> {
  const conditions: SQL[] = [eq(payments.orgId, orgId)]
  if (filter.accountId !== undefined) conditions.push(eq(payments.accountId, filter.accountId))
  if (filter.state !== undefined) conditions.push(eq(payments.state, filter.state))
  if (filter.after !== undefined) conditions.push(gt(payments.id, filter.after))
  return executor.select().from(payments).where(and(...conditions)).orderBy(asc(payments.id)).limit(filter.limit)
}

/** What an authorized payment says of its pending hold, read at start to put the hold back in memory. */
export interface AuthorizedPaymentHold {
  id: string
  holdId: string | null
  orgId: string
  accountId: string
  asset: string
  amount: bigint | null
  expiresAt: Date | null
  createdAt: Date
}

/** The authorized payments' holds, read at start (the payments' own columns only). */
export async function authorizedPaymentHolds(executor: Executor, orgIds?: readonly string[]): Promise<AuthorizedPaymentHold[]> {
  return executor
    .select({
      id: payments.id,
      holdId: payments.holdId,
      orgId: payments.orgId,
      accountId: payments.accountId,
      asset: payments.asset,
      amount: payments.amount,
      expiresAt: payments.expiresAt,
      createdAt: payments.createdAt,
    })
    .from(payments)
    .where(orgIds === undefined ? eq(payments.state, 'authorized') : and(eq(payments.state, 'authorized'), inArray(payments.orgId, [...orgIds])))
}

/**
 * Those of `keys` that are authorized payments, whole (the expiry sweep's read, at most its batch).
 * Read through the key (org_id, id): both lists bound it, and only the exact pairs asked for are kept.
 */
export async function authorizedPaymentsByKeys(executor: Executor, keys: ReadonlyArray<{ orgId: string; id: string }>): Promise<PaymentRecord[]> {
  if (keys.length === 0) return []
  const wanted = new Set(keys.map((key) => `${key.orgId}\u0000${key.id}`))
  const rows = await executor
    .select()
    .from(payments)
    .where(and(inArray(payments.orgId, [...new Set(keys.map((key) => key.orgId))]), inArray(payments.id, keys.map((key) => key.id)), eq(payments.state, 'authorized')))
  return rows.filter((row) => wanted.has(`${row.orgId}\u0000${row.id}`))
}

/** A decline moves no money, so it skips the ledger: its row and event commit together here. */
interface PendingDecline {
  row: PaymentRow
  event: EventRow
  record?: IdempotencyRow
  /** When it was queued (on the recorder's clock). */
  queuedAt: number
  /** Its decline was answered already: nobody waits for this record. */
  answered: boolean
  resolve(outcome: 'recorded' | 'key_taken'): void
  reject(error: unknown): void
}

/**
 * The pause before attempt `attempt + 1` at a write that must become durable while the database
 * cannot be reached (a decline's record, a fail-closed close): 50 ms doubling to at most 2 s.
 */
export function retryDelayMs(attempt: number): number {
  return Math.min(2_000, 50 * 2 ** Math.min(attempt, 6))
}
/**
 * Declines kept waiting for the database at most. Past it `record` refuses a decline, so the
 * service checks `full` first and answers no decline it could not record (see `decline` in
 * service.ts).
 */
export const DECLINE_BACKLOG_MAX = 100_000

/**
 * While every decline waiting for its record was answered already (answered behind, past capacity
 * or with the database failing), the recorder gathers them this long before writing, up to
 * `DECLINE_GATHER_ROWS`: nobody waits, and a batch's commit and start-up shared by more rows cost
 * Postgres and the server's thread much less per decline (measured when shed authorizations were
 * still declines to record, every one shed at 10,000/s: 31 µs of Postgres CPU per decline against
 * 45, and 52 µs of the server's against 59). A decline someone waits for ends the gathering at once.
 */
export const DECLINE_GATHER_MS = 10
const DECLINE_GATHER_ROWS = 256

/** The SQLSTATE of a database error, through the wrappers (drizzle wraps the driver's error as its cause). */
function sqlStateOf(error: unknown): string | undefined {
  for (let current = error, depth = 0; current !== undefined && current !== null && depth < 5; current = (current as { cause?: unknown }).cause, depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code
  }
  return undefined
}

/**
 * Postgres refused the rows themselves (bad data, a broken constraint, a statement it cannot run):
 * writing them again cannot succeed. Anything else (the connection lost or refused, the server
 * shutting down or out of resources) may pass on a later attempt.
 */
function refusedForGood(error: unknown): boolean {
  const state = sqlStateOf(error)
  return state !== undefined && (state.startsWith('22') || state.startsWith('23') || state.startsWith('42'))
}

/**
 * Declines are written in batches like approvals: whatever queued while a write was in flight goes
 * in the next transaction, so a burst of declines (an overloaded or unreachable database) costs a
 * few transactions, not one each. Each decline is written with its event and, with an
 * Idempotency-Key, its saved answer; a key held by a live record means an earlier request owns it,
 * and that decline is answered `key_taken` with nothing of it written.
 *
 * A decline answered while the database is unreachable is still recorded: a batch that fails for
 * any reason but the rows themselves stays queued and is written again (backing off to one attempt
 * every 2 s) until it commits, so every declined payment the caller was told about becomes readable
 * and its `payment.declined` event is sent. A write whose reply was lost may have committed: the
 * rows are written so that writing them again changes nothing. Memory stays bounded: past
 * `backlogMax` waiting declines a new one is refused here, and callers that answer a decline ask
 * `full` first, so no decline is answered that cannot be recorded.
 */
export class DeclineRecorder {
  private queue: PendingDecline[] = []
  private flushing = false
  private stopped = false
  private flushed: (() => void) | undefined
  /** When a batch last committed (on the recorder's clock): a stop waits while they keep committing. */
  private lastWrittenAt = 0
  /** Ends the current gathering (see `gather`), while one is on. */
  private endGathering: (() => void) | undefined

  constructor(
    private readonly executor: Executor,
    private readonly batchMax = 500,
    /** Declines kept waiting at most (tests lower it). */
    public backlogMax = DECLINE_BACKLOG_MAX,
    private readonly gatherMs = DECLINE_GATHER_MS,
    /** What waits, gatherings, retries and a stop's grace are timed on: the process's, or a test's. */
    private readonly clock: MonotonicClock = PROCESS_CLOCK_KEEPING_ALIVE,
  ) {}

  /** No further decline can be queued: `record` would refuse it. */
  get full(): boolean {
    return this.queue.length >= this.backlogMax
  }

  /** `answered`: the decline was answered already, so nobody waits for its record (it may be gathered). */
  record(row: PaymentRow, event: EventRow, record?: IdempotencyRow, { answered = false }: { answered?: boolean } = {}): Promise<'recorded' | 'key_taken'> {
    if (this.stopped) return Promise.reject(new Error('decline records: the service is shutting down'))
    if (this.full) return Promise.reject(new Error(`decline records: ${this.backlogMax} declines already wait for the database; this one is not recorded`))
    return new Promise((resolve, reject) => {
      this.queue.push({ row, event, record, queuedAt: this.clock.now(), answered, resolve, reject })
      if (!this.flushing) void this.flush()
      else if (this.endGathering !== undefined && (!answered || this.queue.length >= DECLINE_GATHER_ROWS)) this.endGathering()
    })
  }

  /** Declines waiting for the database right now. */
  get backlog(): number {
    return this.queue.length
  }

  /**
   * How long the oldest decline still waiting has waited, being written included (milliseconds; 0
   * when none waits): how far the records are behind the answers.
   */
  oldestWaitMs(now = this.clock.now()): number {
    const oldest = this.queue[0]
    return oldest === undefined ? 0 : now - oldest.queuedAt
  }

  /**
   * At shutdown: what waits is written while the database takes it, but a failed write is no longer
   * retried (those declines are refused). Resolves once the writing is over, or once no batch has
   * committed for `graceMs`, or after `drainMaxMs` in all. A full backlog (100,000 declines, about
   * 200 batches) takes seconds to write, and every one of them was answered: a fixed 2 s left most of
   * it unwritten when a server stopped past capacity.
   */
  async stop(graceMs = 2_000, drainMaxMs = 30_000): Promise<void> {
    this.stopped = true
    this.endGathering?.()
    if (!this.flushing) return
    const startedAt = this.clock.now()
    this.lastWrittenAt = startedAt
    const flushed = new Promise<void>((resolve) => (this.flushed = resolve))
    while (this.flushing) {
      const waitMs = Math.min(this.lastWrittenAt + graceMs, startedAt + drainMaxMs) - this.clock.now()
      if (waitMs <= 0) return
      await within(this.clock, waitMs, flushed)
    }
  }

  private async flush(): Promise<void> {
    this.flushing = true
    try {
      for (let attempt = 0; this.queue.length > 0; ) {
        if (attempt === 0) await this.gather()
        // New declines only join the end of the queue, so the batch is still its front afterwards.
        const batch = this.queue.slice(0, this.batchMax)
        const outcome = await this.write(batch, attempt > 0)
        if (outcome.kind === 'written' || refusedForGood(outcome.error)) {
          this.lastWrittenAt = this.clock.now()
          this.queue.splice(0, batch.length)
          if (outcome.kind === 'written') for (const pending of batch) pending.resolve(outcome.taken.has(pending) ? 'key_taken' : 'recorded')
          else for (const pending of batch) pending.reject(outcome.error)
          attempt = 0
          continue
        }
        const failure = outcome.error
        // Shutting down: no retries; everything still waiting is refused (below).
        if (this.stopped) break
        if (attempt % 10 === 0) logFailure('payments.decline-retry', `payments: ${this.queue.length} decline record(s) wait for the database; retrying`, failure)
        await within(this.clock, retryDelayMs(attempt))
        attempt += 1
      }
    } finally {
      this.flushing = false
      if (this.stopped) for (const pending of this.queue.splice(0)) pending.reject(new Error('decline records: the service shut down before this decline was written'))
      this.flushed?.()
    }
  }

  /**
   * Waits up to `gatherMs` for more declines while every one waiting was answered already, and
   * fewer than `DECLINE_GATHER_ROWS` wait; a decline someone waits for, enough rows or a stop end it.
   */
  private async gather(): Promise<void> {
    if (this.gatherMs <= 0 || this.stopped || this.queue.length >= DECLINE_GATHER_ROWS || this.queue.some((pending) => !pending.answered)) return
    await within(this.clock, this.gatherMs, new Promise<void>((resolve) => (this.endGathering = resolve)))
    this.endGathering = undefined
  }

  /**
   * Writes one batch: the declines whose key an earlier request holds (nothing of them written), or
   * why it did not commit. `again`: an earlier attempt failed, and may have committed all the same.
   */
  private async write(batch: PendingDecline[], again: boolean): Promise<{ kind: 'written'; taken: Set<PendingDecline> } | { kind: 'failed'; error: unknown }> {
    try {
      const { statement, duplicates } = declineStatement(batch, again)
      const lost = await queryText<{ op: number | string }>(this.executor, statement)
      const taken = new Set(duplicates)
      for (const row of lost) taken.add(batch[Number(row.op)]!)
      return { kind: 'written', taken }
    } catch (error) {
      return { kind: 'failed', error }
    }
  }
}

const PAYMENT_UPSERT = upsertTail('org_id, id', ['state', 'failure_code', 'closed_at'])
const EVENT_ONCE = 'on conflict (id) do nothing'

/**
 * A batch of declines as one statement that commits by itself, as the ledger writer writes its
 * batches: the claims of their Idempotency-Keys, the payments and their events are parts of it,
 * each reading its rows from a JSON parameter. One round trip and one commit for the batch (it was
 * a transaction of four statements). A decline whose key is held by a live record is left out of
 * every part and answered back (`lost`), as is a later decline of the batch with a key an earlier
 * one claims.
 *
 * A declined payment and its event are new rows (fresh ids; an authorization declined after its
 * late write landed is closed by the ledger writer, not here), so a first attempt inserts them
 * plainly, and a row already there fails it loudly. Only a batch written `again`, after an attempt
 * that failed and may have committed all the same (its reply lost with the connection), is written
 * so that writing it again changes nothing: its payments upserted, its events skipped when there.
 * The idempotent form costs Postgres a probe of each key and a speculative insertion per row,
 * which past capacity, where many declines are answered behind, is much of what a decline costs
 * it (docs/architecture.md, "Admission past capacity").
 */
function declineStatement(batch: PendingDecline[], again: boolean): { statement: TextStatement; duplicates: Set<PendingDecline> } {
  const firstOfKey = new Map<string, number>()
  const duplicates = new Set<PendingDecline>()
  batch.forEach((pending, index) => {
    if (pending.record === undefined) return
    const id = recordId(pending.record.orgId, pending.record.key)
    if (firstOfKey.has(id)) duplicates.add(pending)
    else firstOfKey.set(id, index)
  })
  const kept = batch.map((pending, op) => ({ pending, op })).filter(({ pending }) => !duplicates.has(pending))
  const claims = kept.filter(({ pending }) => pending.record !== undefined)
  const values: Record<string, unknown> = {}
  const parts: string[] = []
  const filter = claims.length > 0 ? { ops: kept.map(({ op }) => op), opFilter: NOT_LOST } : {}
  if (claims.length > 0) {
    const claimed = claimParts(claims.map(({ pending, op }) => ({ record: pending.record!, op })))
    values.claims = claimed.claims
    parts.push(...claimed.parts)
  }
  if (kept.length > 0) {
    const paymentsPart = insertFromJson(payments, kept.map(({ pending }) => pending.row), jsonParameter('payments'), { tail: again ? PAYMENT_UPSERT : undefined, ...filter })
    values.payments = paymentsPart.rows
    parts.push(`payments as (${paymentsPart.text})`)
    const eventsPart = insertFromJson(events, kept.map(({ pending }) => pending.event), jsonParameter('events'), { tail: again ? EVENT_ONCE : undefined, ...filter })
    values.events = eventsPart.rows
    parts.push(`events as (${eventsPart.text})`)
  }
  const answer = claims.length > 0 ? 'select op from lost' : 'select null::integer as op where false'
  const text = parts.length > 0 ? `with ${parts.join(',\n')}\n${answer}` : answer
  return { statement: jsonStatement(text, values), duplicates }
}
