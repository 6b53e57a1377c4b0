import { eventRow } from '../../ledger/events.ts'
import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import type { PendingHold } from '../../ledger/ledger.ts'
import type { LedgerOperation, PaymentRow } from '../../ledger/writer.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Runtime } from '../../runtime.ts'
import { findAsset, type AssetInfo } from '../assets/catalog.ts'
import { holdRow, onHoldExpiry } from '../holds/service.ts'
import { closingHooks, takePendingHold } from '../holds/state.ts'
import { assertWithinLimits } from '../transfers/fees.ts'
import type { AuthorizePaymentInput, CapturePaymentInput, FailureCode, PaymentView } from './model.ts'
import * as repo from './repo.ts'

/** The contract's hard budget: an authorization is answered within it, approved only if durable. */
export const AUTHORIZATION_BUDGET_MS = 500
/** An uncaptured authorization lapses after this long on the organization's clock. */
export const AUTHORIZATION_LIFETIME_MS = 24 * 3600 * 1000
/** Amounts of unsupported assets are still checked for shape; no asset has more decimals than this. */
const UNKNOWN_ASSET_DECIMALS_MAX = 36

/** Ledger refusals that are business declines, and the issuer-like code each answers with. */
const DECLINE_CODES: Partial<Record<string, FailureCode>> = {
  insufficient_available: 'insufficient_funds',
  account_frozen: 'account_frozen',
  min_amount: 'amount_too_small',
  limit_exceeded: 'limit_exceeded',
  unsupported_asset: 'unsupported_asset',
}

interface AuthorizedPayment {
  row: PaymentRow
  externalId: string | null
}

interface PaymentsState {
  budgetMs: number
  /** Authorized payments, by id: exactly those whose hold is pending in the ledger's memory. */
  authorized: Map<string, AuthorizedPayment>
  /** Declines already answered whose record is not durable yet (the database is slow or down). */
  unsettled: Map<string, PaymentRow>
}

const states = new WeakMap<Runtime, PaymentsState>()

function stateOf(runtime: Runtime): PaymentsState {
  let state = states.get(runtime)
  if (!state) {
    state = { budgetMs: AUTHORIZATION_BUDGET_MS, authorized: new Map(), unsettled: new Map() }
    states.set(runtime, state)
  }
  return state
}

/** Tests shorten or lengthen the budget; production keeps the contract's 500 ms. */
export function configurePayments(runtime: Runtime, options: { budgetMs: number }): void {
  stateOf(runtime).budgetMs = options.budgetMs
}

/**
 * Loads authorized payments, marks their holds as owned by them, and joins the hold sweeper so a
 * lapse expires the payment in the same commit as its hold. Runs before the sweeper starts.
 */
export async function startPayments(runtime: Runtime): Promise<void> {
  const state = stateOf(runtime)
  for (const row of await repo.authorizedPayments(runtime.db)) {
    const account = await runtime.ledger.accounts.find(row.accountId)
    state.authorized.set(row.id, { row, externalId: account?.externalId ?? null })
    const hold = row.holdId ? runtime.ledger.pendingHolds.get(row.holdId) : undefined
    if (hold) hold.ownerId = row.id
  }
  onHoldExpiry(runtime, (hold, operation, now) => {
    const entry = state.authorized.get(hold.ownerId!)
    if (!entry) return
    const payment = entry.row
    const expired: PaymentRow = { ...payment, state: 'expired', closedAt: now }
    operation.payments = [...(operation.payments ?? []), expired]
    operation.events!.push(eventRow(hold.orgId, 'payment.expired', eventData(expired, entry.externalId), now))
    const committed = operation.committed
    operation.committed = () => {
      committed?.()
      state.authorized.delete(payment.id)
    }
  })
}

export function toPaymentView(row: PaymentRow): PaymentView {
  const decimals = findAsset(row.asset)?.decimals
  const format = (value: bigint | null | undefined) => (value == null || decimals === undefined ? null : formatAmount(value, decimals))
  return {
    id: row.id,
    state: row.state,
    failureCode: (row.failureCode ?? null) as PaymentView['failureCode'],
    accountId: row.accountId,
    asset: row.asset,
    amount: format(row.amount) ?? row.requestedAmount,
    capturedAmount: format(row.capturedAmount),
    holdId: row.holdId ?? null,
    merchant: row.merchantName ? { name: row.merchantName, mcc: row.merchantMcc ?? null } : null,
    description: row.description ?? null,
    expiresAt: row.expiresAt ? row.expiresAt.toISOString() : null,
    createdAt: row.createdAt.toISOString(),
    closedAt: row.closedAt ? row.closedAt.toISOString() : null,
  }
}

function eventData(row: PaymentRow, externalId: string | null, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const view = toPaymentView(row)
  return { paymentId: row.id, accountId: row.accountId, externalId, amount: view.amount, asset: row.asset, ...extra }
}

/** Resolves to what the promise gave, or to `timeout` if the budget's remaining time runs out first. */
async function withinBudget<T>(promise: Promise<T>, deadline: number): Promise<{ kind: 'done'; value: T } | { kind: 'failed'; error: unknown } | { kind: 'timeout' }> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<{ kind: 'timeout' }>((resolve) => {
    timer = setTimeout(() => resolve({ kind: 'timeout' }), Math.max(0, deadline - performance.now()))
  })
  try {
    return await Promise.race([promise.then((value) => ({ kind: 'done' as const, value }), (error: unknown) => ({ kind: 'failed' as const, error })), timeout])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Decides synchronously and answers inside the budget. Approved: the amount is held on the account
 * through the ledger and the answer waits for the commit. Declined: 201 with a failure code. If the
 * commit is not durable within the budget, the answer is a `processing_timeout` decline and the
 * hold is made uncapturable at once; when the late write lands it is released (see `failClosed`).
 */
export async function authorizePayment(runtime: Runtime, orgId: string, input: AuthorizePaymentInput, receivedAt = performance.now()): Promise<PaymentView> {
  const state = stateOf(runtime)
  // The budget runs from the request's arrival: time spent before the handler counts against it.
  const deadline = receivedAt + state.budgetMs
  const info = findAsset(input.asset)
  const amountMinor = info ? parseAmount(input.amount, info.decimals, 'amount') : (parseAmount(input.amount, UNKNOWN_ASSET_DECIMALS_MAX, 'amount'), null)
  const lookup = await withinBudget(runtime.ledger.accounts.require(orgId, input.accountId, 'accountId'), deadline)
  if (lookup.kind === 'failed') throw lookup.error
  const now = runtime.clock.now(orgId)
  const row: PaymentRow = {
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
  if (lookup.kind === 'timeout') return decline(runtime, row, 'processing_timeout', null, deadline)
  const account = lookup.value
  if (!info || amountMinor === null) return decline(runtime, row, 'unsupported_asset', account.externalId, deadline)
  let submitted: { operation: LedgerOperation; hold: PendingHold; commit: Promise<void> }
  try {
    assertWithinLimits(amountMinor, runtime.ledger.policy(info.asset), info.decimals)
    if (account.status === 'frozen') throw new ApiError('account_frozen', 'frozen')
    submitted = reserve(runtime, row, info, amountMinor, account.externalId, now)
  } catch (error) {
    const code = error instanceof ApiError ? DECLINE_CODES[error.code] : undefined
    if (code === undefined) throw error
    return decline(runtime, row, code, account.externalId, deadline)
  }
  const outcome = await withinBudget(submitted.commit, deadline)
  if (outcome.kind === 'done') return toPaymentView(submitted.operation.payments![0]!)
  if (outcome.kind === 'failed') {
    // The writer already undid the reservation; nothing was applied.
    console.error(`payments: authorization ${row.id} could not commit; declined`, outcome.error)
    return decline(runtime, { ...row, expiresAt: null, holdId: null }, 'processing_error', account.externalId, deadline)
  }
  failClosed(runtime, submitted.hold, submitted.commit, row, account.externalId)
  return decline(runtime, { ...row, expiresAt: null, holdId: null }, 'processing_timeout', account.externalId, deadline, { recordNow: false })
}

/** The reservation: decided and applied to memory in this synchronous step, committed by the writer. */
function reserve(runtime: Runtime, payment: PaymentRow, info: AssetInfo, amountMinor: bigint, externalId: string, now: Date) {
  const state = stateOf(runtime)
  const hold: PendingHold = {
    id: newId('hold'),
    orgId: payment.orgId,
    accountId: payment.accountId,
    asset: info.asset,
    amountMinor,
    expiresAt: new Date(now.getTime() + AUTHORIZATION_LIFETIME_MS),
    createdAt: now,
    closing: false,
    ownerId: payment.id,
  }
  const authorized: PaymentRow = { ...payment, holdId: hold.id, expiresAt: hold.expiresAt }
  const operation: LedgerOperation = {
    orgId: payment.orgId,
    movementId: newId('mv'),
    movementKind: 'payment_authorization',
    reference: payment.id,
    createdAt: now,
    postings: [
      { accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: info.asset, amountMinor: -amountMinor },
      { accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: info.asset, amountMinor },
    ],
    holds: [holdRow(hold, 'pending', null)],
    payments: [authorized],
    events: [eventRow(payment.orgId, 'payment.authorized', eventData(authorized, externalId, { holdId: hold.id, expiresAt: hold.expiresAt.toISOString() }), now)],
    reserve: () => {
      runtime.ledger.pendingHolds.set(hold.id, hold)
      state.authorized.set(payment.id, { row: authorized, externalId })
    },
    revert: () => {
      runtime.ledger.pendingHolds.delete(hold.id)
      state.authorized.delete(payment.id)
    },
  }
  // Throws `insufficient_available` synchronously, having changed nothing.
  const commit = runtime.ledger.submit(operation)
  return { operation, hold, commit }
}

/**
 * The answer was a decline, so this authorization must never be capturable. Its hold is marked
 * closing at once (capture, void and the sweeper all refuse a closing hold). If the late write
 * lands, the hold is released and the payment recorded declined in one commit; if it fails, the
 * writer has undone it and only the decline is recorded.
 */
function failClosed(runtime: Runtime, hold: PendingHold, commit: Promise<void>, payment: PaymentRow, externalId: string): void {
  const state = stateOf(runtime)
  hold.closing = true
  const declined: PaymentRow = { ...payment, state: 'declined', failureCode: 'processing_timeout', holdId: hold.id, expiresAt: null, closedAt: payment.createdAt }
  state.unsettled.set(payment.id, declined)
  commit.then(
    async () => {
      const now = runtime.clock.now(payment.orgId)
      await submitClose(runtime, hold, declined, eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode: 'processing_timeout' }), now), now)
    },
    async () => {
      await repo.insertDecline(runtime.db, { ...declined, holdId: null }, eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode: 'processing_timeout' }), payment.createdAt))
    },
  )
    .then(() => state.unsettled.delete(payment.id))
    .catch((error: unknown) => console.error(`payments: recording the fail-closed decline of ${payment.id} failed; it stays uncapturable in memory`, error))
}

/** Records a decline and answers it; if the record is not durable within the budget it finishes later. */
async function decline(
  runtime: Runtime,
  payment: PaymentRow,
  failureCode: FailureCode,
  externalId: string | null,
  deadline: number,
  options: { recordNow?: boolean } = {},
): Promise<PaymentView> {
  const declined: PaymentRow = { ...payment, state: 'declined', failureCode, closedAt: payment.createdAt }
  if (options.recordNow === false) return toPaymentView(declined)
  const state = stateOf(runtime)
  state.unsettled.set(declined.id, declined)
  const write = repo.insertDecline(runtime.db, declined, eventRow(payment.orgId, 'payment.declined', eventData(declined, externalId, { failureCode }), payment.createdAt))
  write
    .catch((error: unknown) => console.error(`payments: recording decline ${declined.id} failed`, error))
    .finally(() => state.unsettled.delete(declined.id))
  await withinBudget(write, deadline)
  return toPaymentView(declined)
}

/** Closes a payment's hold: the whole hold back to available, the payment's new state in the same commit. */
function submitClose(runtime: Runtime, hold: PendingHold, payment: PaymentRow, event: ReturnType<typeof eventRow>, now: Date): Promise<void> {
  const decimals = findAsset(hold.asset)!.decimals
  return runtime.ledger.submit({
    orgId: hold.orgId,
    movementId: newId('mv'),
    movementKind: 'payment_release',
    reference: payment.id,
    createdAt: now,
    postings: [
      { accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor: -hold.amountMinor },
      { accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor: hold.amountMinor },
    ],
    holds: [holdRow(hold, 'released', now)],
    payments: [payment],
    events: [eventRow(hold.orgId, 'hold.released', { holdId: hold.id, accountId: hold.accountId, asset: hold.asset, amount: formatAmount(hold.amountMinor, decimals) }, now), event],
    ...closedBy(runtime, hold, payment.id),
  })
}

async function findAny(runtime: Runtime, orgId: string, id: string): Promise<PaymentRow | undefined> {
  const unsettled = stateOf(runtime).unsettled.get(id)
  if (unsettled && unsettled.orgId === orgId) return unsettled
  return repo.findPayment(runtime.db, orgId, id)
}

/**
 * The payment's pending hold, taken in the caller's synchronous step. Anything but an authorized
 * payment with a pending hold is refused: `hold_expired` (422) once its 24 h have passed,
 * `hold_not_active` (409) when it is declined, captured, voided, or closing right now.
 */
async function takeAuthorized(runtime: Runtime, orgId: string, id: string): Promise<{ payment: PaymentRow; hold: PendingHold; externalId: string | null }> {
  const found = await findAny(runtime, orgId, id)
  if (!found) throw notFound('payment')
  // From here to the caller's `submit` everything is synchronous: no other request slips in.
  const entry = stateOf(runtime).authorized.get(id)
  if (found.state === 'expired') throw new ApiError('hold_expired', `Payment ${id} expired at ${found.expiresAt?.toISOString()}`)
  if (!entry || found.state !== 'authorized' || !entry.row.holdId) throw new ApiError('hold_not_active', `Payment ${id} is ${found.state === 'authorized' ? 'closing' : found.state}`)
  return { payment: entry.row, hold: takePendingHold(runtime, orgId, entry.row.holdId, undefined, id), externalId: entry.externalId }
}

/** One capture, at most the authorized amount, to the card-settlement account; the rest returns to available in the same commit. */
export async function capturePayment(runtime: Runtime, orgId: string, id: string, input: CapturePaymentInput): Promise<PaymentView> {
  const { payment, hold, externalId } = await takeAuthorized(runtime, orgId, id)
  const decimals = findAsset(hold.asset)!.decimals
  const capturedMinor = input.amount === undefined ? hold.amountMinor : parseAmount(input.amount, decimals, 'amount')
  if (capturedMinor > hold.amountMinor) throw invalid('amount', `The capture of ${formatAmount(capturedMinor, decimals)} exceeds the ${formatAmount(hold.amountMinor, decimals)} authorized`)
  const remainder = hold.amountMinor - capturedMinor
  const now = runtime.clock.now(orgId)
  const captured: PaymentRow = { ...payment, state: 'captured', capturedAmount: capturedMinor, closedAt: now }
  const postings: Posting[] = [{ accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor: -hold.amountMinor }]
  if (remainder > 0n) postings.push({ accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor: remainder })
  postings.push({ accountId: SYSTEM_ACCOUNTS.cardSettlement, kind: 'system', bucket: 'available', asset: hold.asset, amountMinor: capturedMinor })
  const amounts = { capturedAmount: formatAmount(capturedMinor, decimals), releasedAmount: formatAmount(remainder, decimals) }
  await runtime.ledger.submit({
    orgId,
    movementId: newId('mv'),
    movementKind: 'payment_capture',
    reference: payment.id,
    createdAt: now,
    postings,
    holds: [{ ...holdRow(hold, 'captured', now), capturedAmount: capturedMinor }],
    payments: [captured],
    events: [
      eventRow(orgId, 'hold.captured', { holdId: hold.id, accountId: hold.accountId, asset: hold.asset, amount: formatAmount(hold.amountMinor, decimals), ...amounts, transferId: null }, now),
      eventRow(orgId, 'payment.captured', eventData(captured, externalId, amounts), now),
    ],
    ...closedBy(runtime, hold, payment.id),
  })
  return toPaymentView(captured)
}

/** Releases the whole authorization back to available. */
export async function voidPayment(runtime: Runtime, orgId: string, id: string): Promise<PaymentView> {
  const { payment, hold, externalId } = await takeAuthorized(runtime, orgId, id)
  const now = runtime.clock.now(orgId)
  const voided: PaymentRow = { ...payment, state: 'voided', closedAt: now }
  await submitClose(runtime, hold, voided, eventRow(orgId, 'payment.voided', eventData(voided, externalId), now), now)
  return toPaymentView(voided)
}

/** The hold's closing hooks, plus forgetting the authorized payment once the close is durable. */
function closedBy(runtime: Runtime, hold: PendingHold, paymentId: string) {
  const hooks = closingHooks(runtime, hold)
  return {
    ...hooks,
    committed: () => {
      hooks.committed()
      stateOf(runtime).authorized.delete(paymentId)
    },
  }
}

export async function getPayment(runtime: Runtime, orgId: string, id: string): Promise<PaymentView> {
  const row = await findAny(runtime, orgId, id)
  if (!row) throw notFound('payment')
  return toPaymentView(row)
}

export async function listPayments(runtime: Runtime, orgId: string, query: { accountId?: string; after?: string; limit?: number }): Promise<{ payments: PaymentView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listPayments(runtime.db, orgId, { accountId: query.accountId, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toPaymentView)
  return { payments: page.items, hasMore: page.hasMore }
}
