import { basisPointsCeil, type AssetPolicy } from '../../ledger/policy.ts'
import { ApiError } from '../../lib/errors.ts'
import { formatAmount } from '../../lib/money.ts'

export type FeeModel = 'inclusive' | 'additive'

export interface TransferPlan {
  amountMinor: bigint
  feeMinor: bigint
  /** What the destination receives. */
  netAmountMinor: bigint
  /** What leaves the source (its available, or its hold). */
  totalDebitedMinor: bigint
}

/** Limits of the asset's policy, for any amount a transfer or hold moves. */
export function assertWithinLimits(amountMinor: bigint, policy: AssetPolicy, decimals: number, field = 'amount'): void {
  if (amountMinor < policy.transferMinMinor) {
    throw new ApiError('min_amount', `The minimum is ${formatAmount(policy.transferMinMinor, decimals)}`, { field })
  }
  if (amountMinor > policy.transferMaxMinor) {
    throw new ApiError('limit_exceeded', `The maximum is ${formatAmount(policy.transferMaxMinor, decimals)}`, { field })
  }
}

/**
 * Inclusive: the fee comes out of the amount (the source pays `amount`, the destination gets
 * less). Additive: the fee is on top (the destination gets `amount`, the source pays more).
 */
export function planTransfer(amountMinor: bigint, feeModel: FeeModel, policy: AssetPolicy, decimals: number): TransferPlan {
  assertWithinLimits(amountMinor, policy, decimals)
  const feeMinor = basisPointsCeil(amountMinor, policy.transferFeeBps) + policy.transferFeeFixedMinor
  if (feeModel === 'additive') return { amountMinor, feeMinor, netAmountMinor: amountMinor, totalDebitedMinor: amountMinor + feeMinor }
  const netAmountMinor = amountMinor - feeMinor
  if (netAmountMinor <= 0n) {
    throw new ApiError('min_amount', `With the inclusive fee model the amount must exceed the fee of ${formatAmount(feeMinor, decimals)}`, { field: 'amount' })
  }
  return { amountMinor, feeMinor, netAmountMinor, totalDebitedMinor: amountMinor }
}
