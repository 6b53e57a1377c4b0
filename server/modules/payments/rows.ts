import type { Posting } from '../../ledger/hot-balances.ts'
import type { PendingHold } from '../../ledger/ledger.ts'
import type { PaymentRow } from './write-sets.ts'
import { findAsset } from '../../lib/assets.ts'
import { formatAmount } from '../../lib/money.ts'
import { isoOf } from '../../lib/time.ts'
import type { FailureCode, PaymentView } from './model.ts'

/** A payment's row as the API shows it and as its events carry it, and the postings of its reservation. */

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
    expiresAt: row.expiresAt ? isoOf(row.expiresAt) : null,
    createdAt: isoOf(row.createdAt),
    closedAt: row.closedAt ? isoOf(row.closedAt) : null,
  }
}

/** The amount as the view shows it: formatted in the asset's decimals, or as requested for an unknown asset. */
function amountOf(row: PaymentRow): string {
  const decimals = findAsset(row.asset)?.decimals
  return row.amount == null || decimals === undefined ? row.requestedAmount : formatAmount(row.amount, decimals)
}

export function eventData(row: PaymentRow, externalId: string | null, extra: Record<string, unknown> = {}, amount: string = amountOf(row)): Record<string, unknown> {
  return { paymentId: row.id, accountId: row.accountId, externalId, amount, asset: row.asset, ...extra }
}

/** An authorization's reservation: its amount from available to held. */
export function reservationPostings(hold: PendingHold): Posting[] {
  const amountMinor = hold.amountMinor
  return [
    { accountId: hold.accountId, kind: 'customer', bucket: 'available', asset: hold.asset, amountMinor: -amountMinor },
    { accountId: hold.accountId, kind: 'customer', bucket: 'held', asset: hold.asset, amountMinor },
  ]
}

export function declinedRow(payment: PaymentRow, failureCode: FailureCode): PaymentRow {
  return { ...payment, state: 'declined', failureCode, holdId: null, expiresAt: null, closedAt: payment.createdAt }
}
