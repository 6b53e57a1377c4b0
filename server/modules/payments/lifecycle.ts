import { eventRow } from '../events/write-sets.ts'
import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import type { PendingHold } from '../../ledger/ledger.ts'
import type { IdempotencyAnswer } from '../../ledger/writer.ts'
import type { PaymentRow } from './write-sets.ts'
import { findAsset } from '../../lib/assets.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { logFailure } from '../../lib/log.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { type IdempotencyRow } from '../../platform/idempotency.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'
import type { HoldExpiryExtension } from '../holds/expiry.ts'
import type { HoldRecord } from '../holds/repo.ts'
import { holdRow } from '../holds/service.ts'
import { holdRowsToWrite, ownedHoldId, ownerOfHoldId, releasePostings } from '../holds/state.ts'
import type { CapturePaymentInput, PaymentState, PaymentView } from './model.ts'
import * as repo from './repo.ts'
import { eventData, toPaymentView } from './rows.ts'
import type { PaymentsCore } from './state.ts'

/**
 * An authorized payment after its authorization: its hold, which memory keeps pending and the
 * payment's row records; its capture, its void and its lapse (joined to the hold sweep); and reads.
 */

/**
 * Puts the pending holds of authorized payments (of these organizations, or all) back in memory,
 * marked as owned by them: at start, before the hold sweeper starts, and in cluster mode for the organizations this server takes.
 *
 * Memory keeps an authorized payment only as its pending hold (`ownerId` names the payment): capture
 * and void read the payment's row anyway, to answer for any state, and the sweeper reads the rows
 * of the payments it expires, a thousand at most in one query. An uncaptured authorization stays
 * in memory for up to 24 h, and every object it keeps there is one more for the garbage collector
 * to trace (see `bench/authorize-memory.ts`).
 */
export async function loadOwnedHolds(core: PaymentsCore, orgIds?: readonly string[]): Promise<void> {
  for (const payment of await repo.authorizedPaymentHolds(core.db, orgIds)) {
    if (payment.holdId === null) continue
    // A hold made before payments recorded their own holds has its row, loaded with the rest.
    if (core.ledger.holds.assignOwner(payment.holdId, payment.id)) continue
    if (payment.holdId !== ownedHoldId(payment.id) || payment.amount === null || payment.expiresAt === null) continue
    core.ledger.holds.load({
      id: payment.holdId,
      orgId: payment.orgId,
      accountId: payment.accountId,
      asset: payment.asset,
      amountMinor: payment.amount,
      expiresAtMs: payment.expiresAt.getTime(),
      createdAtMs: payment.createdAt.getTime(),
      ownerId: payment.id,
      ownerDurable: true,
    })
  }
}

/** What a payment's row says of the hold it records, by the payment's state. */
const HOLD_STATE_OF_PAYMENT: Record<PaymentRow['state'], HoldRecord['state']> = {
  authorized: 'pending',
  captured: 'captured',
  voided: 'released',
  lapsed: 'expired',
  // Declined with a hold: a fail-closed decline whose late authorization landed and was released.
  declined: 'released',
}

/** The hold a payment's row records (see `ownedHoldId`), as a row of `holds` would say it. */
export async function paymentHold(core: PaymentsCore, orgId: string, holdId: string): Promise<HoldRecord | undefined> {
  const paymentId = ownerOfHoldId(holdId, 'pay')
  if (paymentId === undefined) return undefined
  const payment = await repo.findPayment(core.db, orgId, paymentId)
  if (payment === undefined || payment.holdId !== holdId || payment.amount === null || payment.expiresAt === null) return undefined
  const state = HOLD_STATE_OF_PAYMENT[payment.state]
  return {
    id: holdId,
    orgId: payment.orgId,
    accountId: payment.accountId,
    asset: payment.asset,
    amount: payment.amount,
    state,
    expiresAt: payment.expiresAt,
    capturedAmount: state === 'captured' ? payment.capturedAmount : null,
    transferId: null,
    createdAt: payment.createdAt,
    closedAt: state === 'pending' ? null : payment.closedAt,
  }
}

/**
 * The payments' part of a hold's expiry: an authorization that lapses is recorded `lapsed`, with
 * its `payment.expired` event, in the same commit as its hold's expiry (see `HoldExpiryExtension`).
 */
export function lapseOnExpiry(core: PaymentsCore): HoldExpiryExtension {
  return async (holds) => {
    const rows = await repo.authorizedPaymentsByKeys(core.db, holds.map((hold) => ({ orgId: hold.orgId, id: hold.ownerId! })))
    const byId = new Map(rows.map((row) => [row.id, row]))
    const externalIds = new Map<string, string | null>()
    for (const row of rows) if (!externalIds.has(row.accountId)) externalIds.set(row.accountId, (await core.ledger.accounts.find(row.accountId))?.externalId ?? null)
    return (hold, operation, now) => {
      const payment = byId.get(hold.ownerId!)
      if (payment === undefined || payment.holdId !== hold.id) {
        // Its authorization is still on its way to Postgres (only a clock moved a day ahead gets
        // here first): the hold waits for it.
        if (!hold.ownerDurable) return false
        // Never expected: the hold lapses alone rather than staying pending for ever, and then
        // needs a row of its own to say so (its payment's row no longer records it).
        logFailure('payments.expiry', `payments: hold ${hold.id} lapsed but its payment ${hold.ownerId} is not authorized in the database; the hold expires alone`)
        operation.holds = [holdRow(hold, 'expired', now)]
        return true
      }
      const lapsed: PaymentRow = { ...payment, state: 'lapsed', closedAt: now }
      operation.payments = [...(operation.payments ?? []), lapsed]
      operation.events!.push(eventRow(hold.orgId, 'payment.expired', eventData(lapsed, externalIds.get(payment.accountId) ?? null), now))
      return true
    }
  }
}

/** Closes a payment's hold: the whole hold back to available, the payment's new state in the same commit. */
export function submitClose(core: PaymentsCore, hold: PendingHold, payment: PaymentRow, event: ReturnType<typeof eventRow>, now: Date, idempotencyAnswer?: IdempotencyAnswer, idempotencyRecord?: IdempotencyRow): Promise<void> {
  const decimals = findAsset(hold.asset)!.decimals
  return core.ledger.submit({
    orgId: hold.orgId,
    movementId: newId('mv'),
    movementKind: 'payment_release',
    reference: payment.id,
    createdAt: now,
    postings: releasePostings(hold),
    holds: holdRowsToWrite(hold, holdRow(hold, 'released', now)),
    payments: [payment],
    events: [eventRow(hold.orgId, 'hold.released', { holdId: hold.id, accountId: hold.accountId, asset: hold.asset, amount: formatAmount(hold.amountMinor, decimals) }, now), event],
    idempotencyAnswer,
    idempotencyRecord,
    ...core.ledger.holds.closing(hold),
  })
}

async function findAny(core: PaymentsCore, orgId: string, id: string): Promise<PaymentRow | undefined> {
  const unsettled = core.unsettled.get(id)
  if (unsettled && unsettled.orgId === orgId) return unsettled
  return repo.findPayment(core.db, orgId, id)
}

/**
 * The payment's pending hold, taken in the caller's synchronous step. Anything but an authorized
 * payment with a pending hold is refused: `hold_expired` (422) once its 24 h have passed,
 * `hold_not_active` (409) when it is declined, captured, voided, or being captured or voided right
 * now; `hold_expired` also while its lapse is committing.
 */
async function takeAuthorized(core: PaymentsCore, orgId: string, id: string): Promise<{ payment: PaymentRow; hold: PendingHold; externalId: string | null }> {
  const found = await findAny(core, orgId, id)
  if (!found) throw notFound('payment')
  const externalId = (await core.ledger.accounts.find(found.accountId))?.externalId ?? null
  // From here to the caller's `submit` everything is synchronous: no other request slips in.
  if (found.state === 'lapsed') throw new ApiError('hold_expired', `Payment ${id} lapsed at ${found.expiresAt?.toISOString()}`)
  if (found.state !== 'authorized' || !found.holdId) throw new ApiError('hold_not_active', `Payment ${id} is ${found.state}`)
  const pending = core.ledger.holds.get(found.holdId)
  // Postgres still says authorized while a capture, void or lapse of it commits, or just did.
  if (pending?.expiring) throw new ApiError('hold_expired', `Payment ${id} expired at ${new Date(pending.expiresAtMs).toISOString()}`)
  if (pending === undefined || pending.closing) throw new ApiError('hold_not_active', `Payment ${id} is closing`)
  return { payment: found, hold: core.holds.take(orgId, found.holdId, undefined, id), externalId }
}

/** One capture, at most the authorized amount, to the card-settlement account; the rest returns to available in the same commit. */
export async function capturePayment(core: PaymentsCore, orgId: string, id: string, input: CapturePaymentInput): Promise<PaymentView> {
  const { payment, hold, externalId } = await takeAuthorized(core, orgId, id)
  const decimals = findAsset(hold.asset)!.decimals
  const authorizedMinor = hold.amountMinor
  const capturedMinor = input.amount === undefined ? authorizedMinor : parseAmount(input.amount, decimals, 'amount')
  if (capturedMinor > authorizedMinor) throw invalid('amount', `The capture of ${formatAmount(capturedMinor, decimals)} exceeds the ${formatAmount(authorizedMinor, decimals)} authorized`)
  const remainder = authorizedMinor - capturedMinor
  const now = core.clock.now(orgId)
  const captured: PaymentRow = { ...payment, state: 'captured', capturedAmount: capturedMinor, closedAt: now }
  const postings: Posting[] = [{ accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor: -authorizedMinor }]
  if (remainder > 0n) postings.push({ accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor: remainder })
  postings.push({ accountId: SYSTEM_ACCOUNTS.cardSettlement, kind: 'system', bucket: 'available', asset: hold.asset, amountMinor: capturedMinor })
  const amounts = { capturedAmount: formatAmount(capturedMinor, decimals), releasedAmount: formatAmount(remainder, decimals) }
  await core.ledger.submit({
    orgId,
    movementId: newId('mv'),
    movementKind: 'payment_capture',
    reference: payment.id,
    createdAt: now,
    postings,
    holds: holdRowsToWrite(hold, { ...holdRow(hold, 'captured', now), capturedAmount: capturedMinor }),
    payments: [captured],
    events: [
      eventRow(orgId, 'hold.captured', { holdId: hold.id, accountId: hold.accountId, asset: hold.asset, amount: formatAmount(hold.amountMinor, decimals), ...amounts, transferId: null }, now),
      eventRow(orgId, 'payment.captured', eventData(captured, externalId, amounts), now),
    ],
    idempotencyRecord: answerInCommit(toPaymentView(captured)),
    ...core.ledger.holds.closing(hold),
  })
  return toPaymentView(captured)
}

/** Releases the whole authorization back to available. */
export async function voidPayment(core: PaymentsCore, orgId: string, id: string): Promise<PaymentView> {
  const { payment, hold, externalId } = await takeAuthorized(core, orgId, id)
  const now = core.clock.now(orgId)
  const voided: PaymentRow = { ...payment, state: 'voided', closedAt: now }
  await submitClose(core, hold, voided, eventRow(orgId, 'payment.voided', eventData(voided, externalId), now), now, undefined, answerInCommit(toPaymentView(voided)))
  return toPaymentView(voided)
}

export async function getPayment(core: PaymentsCore, orgId: string, id: string): Promise<PaymentView> {
  const row = await findAny(core, orgId, id)
  if (!row) throw notFound('payment')
  return toPaymentView(row)
}

export async function listPayments(core: PaymentsCore, orgId: string, query: { accountId?: string; state?: PaymentState; after?: string; limit?: number }): Promise<{ payments: PaymentView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listPayments(core.db, orgId, { accountId: query.accountId, state: query.state, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toPaymentView)
  return { payments: page.items, hasMore: page.hasMore }
}
