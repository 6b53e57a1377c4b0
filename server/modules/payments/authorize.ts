import type { AccountEntry } from '../../ledger/accounts.ts'
import { eventRow } from '../events/write-sets.ts'
import { newPendingHold, type PendingHold } from '../../ledger/ledger.ts'
import { IdempotencyKeyTaken, OperationWithdrawn, type LedgerOperation } from '../../ledger/writer.ts'
import type { PaymentRow } from './write-sets.ts'
import { findAsset, type AssetInfo } from '../../lib/assets.ts'
import { ApiError } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { logFailure } from '../../lib/log.ts'
import { parseAmount } from '../../lib/money.ts'
import { inlineRecord } from '../../platform/idempotency.ts'
import { ownedHoldId } from '../holds/state.ts'
import { assertWithinLimits } from '../transfers/fees.ts'
import { Budget, done } from './budget.ts'
import { decline, failClosed, replayTakenKey } from './declines.ts'
import type { AuthorizePaymentInput, FailureCode } from './model.ts'
import { eventData, reservationPostings, toPaymentView } from './rows.ts'
import { slowEntry, type AuthorizationTrace } from './slow.ts'
import { AUTHORIZATION_ANSWER_MARGIN_MS, AUTHORIZATION_LIFETIME_MS, inFlightId, type AuthorizeAnswer, type AuthorizeContext, type PaymentsCore } from './state.ts'

/**
 * The authorization, the product's hot path: decided against memory and reserved there in one
 * synchronous step, answered once the group-commit writer has made it durable, within the budget.
 */

/** Amounts of unsupported assets are still checked for shape; no asset has more decimals than this. */
const UNKNOWN_ASSET_DECIMALS_MAX = 36

/**
 * Ledger refusals that are business declines. A decline's failureCode is the refusal's own code
 * from the contract's error vocabulary, so one reason reads the same on a payment as on a transfer
 * or a hold.
 */
const DECLINE_CODES: Partial<Record<string, FailureCode>> = {
  insufficient_available: 'insufficient_available',
  account_frozen: 'account_frozen',
  min_amount: 'min_amount',
  limit_exceeded: 'limit_exceeded',
  unsupported_asset: 'unsupported_asset',
}

/**
 * Decides synchronously and answers inside the budget, counted from the request's arrival.
 * Approved: the amount is held on the account through the ledger and the answer waits for the
 * commit, which also holds the idempotency record. Declined: 201 with a failure code. If the commit
 * is not durable within the budget, the answer is a `processing_timeout` decline and the hold is
 * made uncapturable at once; when the late write lands it is released (see `failClosed`).
 */
export async function authorizePayment(core: PaymentsCore, orgId: string, input: AuthorizePaymentInput, context: AuthorizeContext): Promise<AuthorizeAnswer> {
  const budget = new Budget(core.deadlines, context.receivedAt + core.budgetMs - Math.min(AUTHORIZATION_ANSWER_MARGIN_MS, core.budgetMs / 2))
  const trace: AuthorizationTrace = { paymentId: null, failureCode: null, batch: undefined, queuedAt: 0 }
  try {
    const answer = await authorizeWithin(core, orgId, input, { ...context, trace }, budget)
    const answeredAt = performance.now()
    const tookMs = answeredAt - context.receivedAt
    core.answerLatency.record(tookMs)
    if (core.slow.isSlow(tookMs)) core.slow.add(slowEntry(trace, answer.kind === 'replay', context.receivedAt, answeredAt))
    return answer
  } finally {
    budget.end()
  }
}

async function authorizeWithin(core: PaymentsCore, orgId: string, input: AuthorizePaymentInput, context: AuthorizeContext, budget: Budget): Promise<AuthorizeAnswer> {
  // The key was answered already and its record is not durable yet: that answer is replayed.
  if (context.idempotency && core.answersInFlight.has(inFlightId(orgId, context.idempotency.key))) return replayTakenKey(core, orgId, context, budget)
  const info = findAsset(input.asset)
  const amountMinor = info ? parseAmount(input.amount, info.decimals, 'amount') : (parseAmount(input.amount, UNKNOWN_ASSET_DECIMALS_MAX, 'amount'), null)
  // A known account is read from memory in this step: no promise, no race, no turn of the loop.
  const known = core.ledger.accounts.cached(orgId, input.accountId, 'accountId')
  const lookup = known !== undefined ? done(known) : await budget.race(core.ledger.accounts.require(orgId, input.accountId, 'accountId'))
  if (lookup.kind === 'failed') throw lookup.error
  const now = core.clock.now(orgId)
  const row = newPaymentRow(orgId, input, info, amountMinor, now)
  if (context.trace) context.trace.paymentId = row.id
  if (lookup.kind === 'timeout') return decline(core, row, 'processing_timeout', null, budget, context)
  const account = lookup.value
  if (!info || amountMinor === null) return decline(core, row, 'unsupported_asset', account.externalId, budget, context)
  let submitted: { operation: LedgerOperation; hold: PendingHold; commit: Promise<void>; body: string }
  try {
    assertWithinLimits(amountMinor, core.ledger.policy(info.asset), info.decimals)
    if (account.status === 'frozen') throw new ApiError('account_frozen', 'frozen')
    // Admission: when the writer's queue is already longer than the budget left, the approval could
    // not be durable in time; declining now keeps the writer approving at its capacity. A standing
    // queue (past capacity) is held to its target, so admitted approvals still answer within the
    // contract's p99 rather than at the end of the budget.
    const waitMs = core.ledger.writer.expectedWaitMs()
    const decidedAt = performance.now()
    const remainingMs = budget.deadline - decidedAt
    if (waitMs > (core.writerQueue.observe(waitMs, decidedAt) ? Math.min(remainingMs, core.writerQueue.targetMs) : remainingMs)) {
      return decline(core, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, budget, context)
    }
    submitted = reserve(core, row, info, amountMinor, account, now, context, budget.deadline)
  } catch (error) {
    const code = error instanceof ApiError ? DECLINE_CODES[error.code] : undefined
    if (code === undefined) throw error
    return decline(core, row, code, account.externalId, budget, context)
  }
  const outcome = await budget.race(submitted.commit)
  if (outcome.kind === 'done') {
    if (performance.now() <= budget.deadline) return { kind: 'answer', body: submitted.body }
    // Durable, but seen only after the decision was due: the thread ran late (past capacity), and
    // the commit's reply was handled before the budget's timer had its turn. Answered as the timer
    // would have answered, a fail-closed decline, with the write that landed released: an approval
    // is never given after its deadline, when a caller may have stopped waiting for it.
    return { kind: 'answer', body: failClosed(core, submitted.hold, submitted.commit, row, account.externalId, context) }
  }
  if (outcome.kind === 'failed') {
    if (outcome.error instanceof IdempotencyKeyTaken) return replayTakenKey(core, orgId, context, budget)
    // Withdrawn by the writer because it could not have committed before the deadline: nothing was applied.
    if (outcome.error instanceof OperationWithdrawn) return decline(core, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, budget, context)
    // The writer undid the reservation, but a commit whose reply was lost with the connection may
    // have landed all the same: settled like a late write (see `failClosed`).
    logFailure('payments.commit', `payments: authorization ${row.id} could not commit; declined`, outcome.error)
    return { kind: 'answer', body: failClosed(core, submitted.hold, submitted.commit, row, account.externalId, context, 'processing_error') }
  }
  // Still waiting for the writer (the database is slow or down): taken back, it will never be
  // written, and only the decline is recorded.
  if (core.ledger.withdraw(submitted.operation)) return decline(core, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, budget, context)
  return { kind: 'answer', body: failClosed(core, submitted.hold, submitted.commit, row, account.externalId, context) }
}

/** An authorization's payment as requested, before it is decided (state `authorized`, nothing held yet). */
function newPaymentRow(orgId: string, input: AuthorizePaymentInput, info: AssetInfo | undefined, amountMinor: bigint | null, now: Date): PaymentRow {
  return {
    id: newId('pay'),
    orgId,
    accountId: input.accountId,
    asset: info?.asset ?? input.asset,
    amount: amountMinor,
    requestedAmount: input.amount,
    state: 'authorized',
    failureCode: null,
    holdId: null,
    capturedAmount: null,
    merchantName: input.merchant?.name ?? null,
    merchantMcc: input.merchant?.mcc ?? null,
    description: input.description ?? null,
    expiresAt: null,
    createdAt: now,
    closedAt: null,
  }
}

/** The reservation: decided and applied to memory in this synchronous step, committed by the writer. */
function reserve(core: PaymentsCore, payment: PaymentRow, info: AssetInfo, amountMinor: bigint, account: AccountEntry, now: Date, context: AuthorizeContext, deadline: number) {
  const externalId = account.externalId
  const hold = newPendingHold({
    // The payment's row records the hold: no row of `holds` is written for it.
    id: ownedHoldId(payment.id),
    orgId: payment.orgId,
    // The directory's string, not the request's copy of it: the hold may stay in memory for a day.
    accountId: account.id,
    asset: info.asset,
    amountMinor,
    expiresAtMs: now.getTime() + AUTHORIZATION_LIFETIME_MS,
    createdAtMs: now.getTime(),
    ownerId: payment.id,
  })
  const authorized: PaymentRow = { ...payment, holdId: hold.id, expiresAt: new Date(hold.expiresAtMs) }
  // One view serves the answer, the event's amount and expiry, and (as the same text) the saved idempotent answer.
  const view = toPaymentView(authorized)
  const body = JSON.stringify(view)
  const operation: LedgerOperation = {
    orgId: payment.orgId,
    // The payment's row records the reservation's movement too: no row of `ledger_movements` is
    // written for it (`server/ledger/journal.ts`).
    recordedByRow: true,
    createdAt: now,
    deadline,
    postings: reservationPostings(hold),
    payments: [authorized],
    events: [eventRow(payment.orgId, 'payment.authorized', eventData(authorized, externalId, { holdId: hold.id, expiresAt: view.expiresAt }, view.amount), now)],
    idempotencyRecord: context.idempotency ? inlineRecord(context.idempotency, 201, body, core.clock.wallNowMs()) : undefined,
    reserve: () => {
      core.ledger.holds.open(hold)
    },
    revert: () => {
      core.ledger.holds.close(hold.id)
    },
    committed: (batch, queuedAt) => {
      hold.ownerDurable = true
      const trace = context.trace
      if (trace) {
        trace.batch = batch
        trace.queuedAt = queuedAt
      }
    },
  }
  // Throws `insufficient_available` synchronously, having changed nothing.
  const commit = core.ledger.submit(operation)
  return { operation, hold, commit, body }
}
