import { formatAmount } from '../../lib/money.ts'
import { sandboxDigest } from '../vaults/prices.ts'
import type { IntentRecord } from './repo.ts'

/** The digest an intent's on-chain transaction has (sandbox: derived from the intent and the step). */
export function intentDigest(intentId: string, step: string): string {
  return sandboxDigest('intent', intentId, step)
}

export interface IntentView {
  id: string
  recordId: string
  accountId: string
  vaultId: string
  state: IntentRecord['state']
  reason: IntentRecord['reason']
  settlementCycle: number | null
  createdAt: string
  settledAt: string | null
}

function base(row: IntentRecord, cycleNumber: number | null): IntentView {
  return {
    id: row.id,
    recordId: row.recordId,
    accountId: row.accountId,
    vaultId: row.vaultId,
    state: row.state,
    reason: row.reason,
    settlementCycle: cycleNumber,
    createdAt: row.createdAt.toISOString(),
    settledAt: row.settledAt?.toISOString() ?? null,
  }
}

export function toSubscriptionView(row: IntentRecord, cycleNumber: number | null, decimals: number) {
  return {
    ...base(row, cycleNumber),
    amount: formatAmount(row.amount!, decimals),
    fee: formatAmount(row.fee, decimals),
    shares: row.shares === null ? null : formatAmount(row.shares, decimals),
  }
}

export function toRedemptionView(row: IntentRecord, cycleNumber: number | null, decimals: number) {
  return {
    ...base(row, cycleNumber),
    mode: row.mode === 'cycle' ? ('queued' as const) : ('instant' as const),
    shares: formatAmount(row.shares!, decimals),
    amount: row.amount === null ? null : formatAmount(row.amount, decimals),
    fee: formatAmount(row.fee, decimals),
    payout: row.payout,
    claimedAt: row.claimedAt?.toISOString() ?? null,
    quoteId: row.quoteId,
  }
}
