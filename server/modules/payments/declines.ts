import { eventRow } from '../events/write-sets.ts'
import { deltasOf } from '../../ledger/hot-balances.ts'
import type { PendingHold } from '../../ledger/ledger.ts'
import { CommitFailedError, IdempotencyKeyTaken, type IdempotencyAnswer } from '../../ledger/writer.ts'
import type { PaymentRow } from './write-sets.ts'
import { ApiError } from '../../lib/errors.ts'
import { logFailure } from '../../lib/log.ts'
import { inlineRecord, judgeExisting, type InlineIdempotency } from '../../platform/idempotency.ts'
import type { Budget } from './budget.ts'
import { submitClose } from './lifecycle.ts'
import type { FailureCode } from './model.ts'
import * as repo from './repo.ts'
import { declinedRow, eventData, reservationPostings, toPaymentView } from './rows.ts'
import { DECLINE_RECORD_LAG_MAX_MS, inFlightId, overloadedRefusal, type AuthorizeAnswer, type AuthorizeContext, type PaymentsCore } from './state.ts'

/**
 * An authorization's declines: recorded (with its idempotency record) and answered within the
 * budget, or answered first and recorded behind when waiting would only spend the budget; the
 * fail-closed decline of an approval that could not be answered in time, whose late write is
 * released if it lands; and the replay of a key an earlier request holds.
 */

/**
 * The key was held by an earlier request: its saved answer is replayed (or the request refused as
 * a conflict). A decline given while a late write was still being closed wins over what the
 * database says for that moment.
 */
export async function replayTakenKey(core: PaymentsCore, orgId: string, context: AuthorizeContext, budget: Budget): Promise<AuthorizeAnswer> {
  const claim = context.idempotency!
  const request = { method: claim.method, path: claim.path, body: claim.requestBody, requestHash: claim.requestHash }
  const pending = core.answersInFlight.get(inFlightId(orgId, claim.key))
  const found = pending
    ? { kind: 'done' as const, value: { method: claim.method, path: claim.path, requestBody: null, requestHash: pending.requestHash, state: 'completed' as const, responseStatus: 201, responseBody: pending.body } }
    : await budget.race(context.records.find(orgId, claim.key))
  if (found.kind !== 'done' || found.value === undefined) {
    throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
  }
  const outcome = judgeExisting(found.value, request)
  if (outcome.kind !== 'replay') throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
  return { kind: 'replay', status: outcome.status, body: outcome.body }
}

/**
 * The answer was a decline while the authorization was already being written, so it must never be
 * capturable. Its hold is marked
 * closing at once (capture, void and the sweeper all refuse a closing hold). If the late write
 * lands, the hold is released, the payment recorded declined and its saved idempotent answer
 * rewritten, in one commit; if it fails, the writer has undone it and only the decline is recorded.
 * Answers the decline's JSON, the text the caller gets.
 */
export function failClosed(core: PaymentsCore, hold: PendingHold, commit: Promise<void>, payment: PaymentRow, externalId: string, context: AuthorizeContext, failureCode: FailureCode = 'processing_timeout'): string {
  if (context.trace) context.trace.failureCode = failureCode
  hold.closing = true
  const declined: PaymentRow = { ...declinedRow(payment, failureCode), holdId: hold.id }
  const declinedBody = JSON.stringify(toPaymentView(declinedRow(payment, failureCode)))
  const claim = context.idempotency
  core.unsettled.set(payment.id, declined)
  if (claim) core.answersInFlight.set(inFlightId(payment.orgId, claim.key), { requestHash: claim.requestHash, body: declinedBody })
  const declinedEvent = (at: Date) => eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode }), at)
  const settle = (reported: boolean, error?: unknown) => async () => {
    // A commit reported as failed has landed if its payment is in Postgres (read once the database
    // answers again); memory, which undid it, then takes the database's balances and the hold back.
    const landed = reported || (error instanceof CommitFailedError && (await repo.findPayment(core.db, payment.orgId, payment.id))?.state === 'authorized')
    if (landed && !reported) {
      await core.ledger.writer.resync(deltasOf(payment.orgId, reservationPostings(hold), 1n))
      core.ledger.holds.restore(hold)
    }
    if (landed) {
      const now = core.clock.now(payment.orgId)
      const answer: IdempotencyAnswer | undefined = claim ? { orgId: claim.orgId, key: claim.key, responseStatus: 201, responseBody: declinedBody } : undefined
      // A failed close gives the hold back as pending (its revert); it must stay closed until the close lands.
      await submitClose(core, hold, declined, declinedEvent(now), now, answer).finally(() => {
        hold.closing = true
      })
      return
    }
    // A taken key means an earlier request owns it: only the decline itself is recorded.
    const record = claim && !(error instanceof IdempotencyKeyTaken) ? inlineRecord(claim, 201, declinedBody, core.clock.wallNowMs()) : undefined
    await core.declines.record({ ...declined, holdId: null }, declinedEvent(payment.createdAt), record)
  }
  commit
    .then(
      () => untilDurable(core, payment.id, settle(true)),
      (error: unknown) => untilDurable(core, payment.id, settle(false, error)),
    )
    .then(() => {
      core.unsettled.delete(payment.id)
      if (claim) core.answersInFlight.delete(inFlightId(payment.orgId, claim.key))
    })
  return declinedBody
}

/**
 * Retries `write` until it commits: a fail-closed decline whose close (or record) failed, because
 * the database went away again, would otherwise leave the late authorization in Postgres as
 * `authorized`, capturable after a restart. Memory keeps it uncapturable meanwhile. Stops only
 * when the service shuts down.
 */
async function untilDurable(core: PaymentsCore, paymentId: string, write: () => Promise<void>): Promise<void> {
  for (let attempt = 0; !core.stopped; attempt++) {
    try {
      await write()
      return
    } catch (error) {
      if (attempt % 20 === 0) logFailure('payments.fail-closed', `payments: the fail-closed decline of ${paymentId} is not durable yet; retrying`, error)
      await Bun.sleep(repo.retryDelayMs(attempt))
    }
  }
}

/**
 * Records a decline (with the request's idempotency record) and answers it; if the record is not
 * durable within the budget the answer is given anyway and the record finishes later.
 */
export async function decline(core: PaymentsCore, payment: PaymentRow, failureCode: FailureCode, externalId: string | null, budget: Budget, context: AuthorizeContext): Promise<AuthorizeAnswer> {
  if (context.trace) context.trace.failureCode = failureCode
  // Every decline answered is recorded: when the records are as far behind as memory may keep
  // them, the request is refused instead, with nothing decided, reserved or recorded (no payment
  // id is given out that could not be read back). Nothing was reserved on any path here.
  if (core.declines.full) {
    core.refusedUnrecordable += 1
    throw overloadedRefusal(`${core.declines.backlog} declines already wait to be recorded`)
  }
  const claim = context.idempotency
  // A decline normally waits for its record, so the answer is durable: readable from every
  // instance, in the event log, and, with an Idempotency-Key, the key's answer everywhere. It is
  // answered now, its record written in the background and read from memory until then (retried
  // until the database takes it, see `DeclineRecorder`), when waiting would only spend the budget:
  // - the database is known to be failing or stalled;
  // - the records are behind (past capacity, declines arrive faster than they are written), and
  //   the decline has no key. Waiting there made every decline take the whole budget, and answers
  //   crossed 500 ms once the server's thread was the bottleneck (7,171 of them in 8 s at 15,000/s
  //   offered). A keyed decline still waits, within the budget: its key must not be answered
  //   otherwise by another instance meanwhile;
  // - the budget is spent (its timer fired before the commit came, or the decline was reached
  //   after the deadline): a record raced now gets one more turn of the loop, never enough for a
  //   commit, and past capacity that turn is long (in a scratch log at 10,000/s, turns 60 to 140 ms
  //   late answered 256 to 1,056 such declines each), so the answer waited it out for nothing.
  //
  // A decline without a key waits for its own record at most `DECLINE_RECORD_LAG_MAX_MS`, the lag
  // past which records count as behind: a record slower than that is one falling behind, and the
  // first declines of a slow spell, with nothing behind them yet, otherwise waited out their whole
  // budget for it, answered at its end, which crosses 500 ms once the thread runs late (the
  // a scratch count at 10,000/s offered: 221 declines by admission in one second waited 348
  // ms each in the server for their records).
  const answerNow = budget.spent() || !core.ledger.writer.healthy() || (claim === undefined && core.declines.oldestWaitMs() > DECLINE_RECORD_LAG_MAX_MS)
  const { body, write, forgetAnswer } = startDeclineRecord(core, payment, failureCode, externalId, claim, answerNow)
  if (answerNow) return { kind: 'answer', body }
  const outcome = await (claim === undefined ? budget.raceFor(write, DECLINE_RECORD_LAG_MAX_MS) : budget.race(write))
  if (outcome.kind === 'done' && outcome.value === 'key_taken') {
    // An earlier request owns the key: its answer is the one to replay, not this one.
    forgetAnswer()
    return replayTakenKey(core, payment.orgId, context, budget)
  }
  return { kind: 'answer', body }
}

/**
 * A decline's answer, and its record started: the payment (read from memory until the record is
 * durable), its `payment.declined` event and, with a key, its saved answer, which a retry with the
 * same key replays from memory meanwhile rather than being decided again while the database is away.
 */
function startDeclineRecord(
  core: PaymentsCore,
  payment: PaymentRow,
  failureCode: FailureCode,
  externalId: string | null,
  claim: InlineIdempotency | undefined,
  /** The decline is answered before its record is durable: nobody waits for the record. */
  answered: boolean,
): { body: string; write: Promise<'recorded' | 'key_taken'>; forgetAnswer: () => void } {
  const declined: PaymentRow = { ...payment, state: 'declined', failureCode, closedAt: payment.createdAt }
  const view = toPaymentView(declined)
  const body = JSON.stringify(view)
  core.unsettled.set(declined.id, declined)
  const record = claim ? inlineRecord(claim, 201, body, core.clock.wallNowMs()) : undefined
  const inFlight = claim ? { key: inFlightId(payment.orgId, claim.key), answer: { requestHash: claim.requestHash, body } } : undefined
  if (inFlight) core.answersInFlight.set(inFlight.key, inFlight.answer)
  const forgetAnswer = () => {
    if (inFlight && core.answersInFlight.get(inFlight.key) === inFlight.answer) core.answersInFlight.delete(inFlight.key)
  }
  const write = core.declines.record(declined, eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode }, view.amount), payment.createdAt), record, { answered })
  write
    .catch((error: unknown) => logFailure('payments.decline-record', `payments: recording decline ${declined.id} failed`, error))
    .finally(() => {
      core.unsettled.delete(declined.id)
      forgetAnswer()
    })
  return { body, write, forgetAnswer }
}
