import type { AssetCode } from '../lib/assets.ts'

/**
 * Per-asset money rules, in minor units. One table so limits and fees are changed in one place
 * and every module (transfers, holds, quotes) reads the same numbers.
 */
export interface AssetPolicy {
  /** Smallest amount a transfer or hold may move (`min_amount` below it). */
  transferMinMinor: bigint
  /** Largest amount a single transfer or hold may move (`limit_exceeded` above it). */
  transferMaxMinor: bigint
  /** Transfer fee: basis points of the amount, rounded up to the minor unit, plus a fixed part. */
  transferFeeBps: bigint
  transferFeeFixedMinor: bigint
  withdrawalMinMinor: bigint
  withdrawalMaxMinor: bigint
  /** What the chain charges to send this asset, passed through at cost. */
  withdrawalNetworkFeeMinor: bigint
  withdrawalServiceFeeBps: bigint
  /** How long a withdrawal quote can be executed. */
  quoteLifetimeSeconds: number
}

const MICRO = 1_000_000n

export const DEFAULT_ASSET_POLICIES: Readonly<Record<AssetCode, AssetPolicy>> = {
  USDC: {
    transferMinMinor: MICRO / 10n,
    transferMaxMinor: 1_000_000n * MICRO,
    transferFeeBps: 10n,
    transferFeeFixedMinor: MICRO / 100n,
    withdrawalMinMinor: MICRO,
    withdrawalMaxMinor: 100_000n * MICRO,
    withdrawalNetworkFeeMinor: MICRO / 20n,
    withdrawalServiceFeeBps: 15n,
    quoteLifetimeSeconds: 60,
  },
  USDT: {
    transferMinMinor: MICRO / 10n,
    transferMaxMinor: 1_000_000n * MICRO,
    transferFeeBps: 10n,
    transferFeeFixedMinor: MICRO / 100n,
    withdrawalMinMinor: 5n * MICRO,
    withdrawalMaxMinor: 100_000n * MICRO,
    withdrawalNetworkFeeMinor: MICRO,
    withdrawalServiceFeeBps: 15n,
    quoteLifetimeSeconds: 60,
  },
}

/** Basis points of an amount, rounded up: the house never under-collects by a fraction of a unit. */
export function basisPointsCeil(amountMinor: bigint, bps: bigint): bigint {
  return (amountMinor * bps + 9_999n) / 10_000n
}
