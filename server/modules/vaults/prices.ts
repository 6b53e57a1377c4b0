import { base58 } from '@scure/base'
import { assert } from '../../lib/assert.ts'

/**
 * Share prices are fixed point: asset minor units per share minor unit, times 10^18. Shares have
 * the asset's decimals, so a price of exactly 1 (PRICE_ONE) means one share is worth one unit.
 * Every conversion rounds down, which is always against the account: a subscription mints at
 * most what was paid for, a redemption pays at most what the shares are worth.
 */
export const PRICE_DECIMALS = 18
export const PRICE_ONE = 10n ** 18n

/** Shares minted for an amount at a price, rounded down. */
export function sharesFor(amountMinor: bigint, price: bigint): bigint {
  assert(price > 0n && amountMinor >= 0n, 'a positive price and a non-negative amount')
  return (amountMinor * PRICE_ONE) / price
}

/** What shares are worth at a price, rounded down. */
export function valueOf(shares: bigint, price: bigint): bigint {
  assert(price > 0n && shares >= 0n, 'a positive price and non-negative shares')
  return (shares * price) / PRICE_ONE
}

/** Basis points of an amount, rounded up: a fee is never under-collected by a fraction of a unit. */
export function feeFor(amountMinor: bigint, bps: number): bigint {
  return (amountMinor * BigInt(bps) + 9_999n) / 10_000n
}

/**
 * Splits `total` over parts weighted by `weights` (locked shares), each rounded down; the remainder
 * goes to the part at `remainderIndex`, so the parts sum exactly to `total`.
 */
export function splitByWeight(total: bigint, weights: readonly bigint[], remainderIndex: number): bigint[] {
  const weightSum = weights.reduce((sum, weight) => sum + weight, 0n)
  assert(weightSum > 0n, 'a split has positive weights')
  const parts = weights.map((weight) => (total * weight) / weightSum)
  const remainder = total - parts.reduce((sum, part) => sum + part, 0n)
  parts[remainderIndex] = parts[remainderIndex]! + remainder
  return parts
}

/** The part that takes a split's remainder: the largest weight, the earliest on a tie. */
export function remainderIndexOf(weights: readonly bigint[]): number {
  let best = 0
  for (let index = 1; index < weights.length; index++) if (weights[index]! > weights[best]!) best = index
  return best
}

/** A price as a decimal string, trailing zeros trimmed down to at least `minDecimals`. */
export function formatPrice(price: bigint, minDecimals = 6): string {
  const digits = price.toString().padStart(PRICE_DECIMALS + 1, '0')
  const whole = digits.slice(0, digits.length - PRICE_DECIMALS)
  let fraction = digits.slice(digits.length - PRICE_DECIMALS)
  while (fraction.length > minDecimals && fraction.endsWith('0')) fraction = fraction.slice(0, -1)
  return `${whole}.${fraction}`
}

/** Parses an operator's decimal price (at most 18 decimals) into fixed point. */
export function parsePrice(text: string): bigint | undefined {
  const match = /^(0|[1-9]\d{0,12})(?:\.(\d{1,18}))?$/.exec(text)
  if (!match) return undefined
  const price = BigInt(match[1]! + (match[2] ?? '').padEnd(PRICE_DECIMALS, '0'))
  return price > 0n ? price : undefined
}

export const APY_WINDOW_DAYS = 7
const DAY_MS = 86_400_000

/**
 * The apy from the trailing window: the price change over the last APY_WINDOW_DAYS days,
 * compounded over a year (365 / window), as a fraction with 6 decimals ("0.052000" is 5.2 %).
 * Informational, so computed in floating point; null without a price that old.
 */
export function apyFrom(priceNow: bigint, priceWindowAgo: bigint | undefined): string | null {
  if (priceWindowAgo === undefined || priceWindowAgo <= 0n) return null
  const ratio = Number((priceNow * 1_000_000_000_000n) / priceWindowAgo) / 1e12
  const apy = ratio ** (365 / APY_WINDOW_DAYS) - 1
  return apy.toFixed(6)
}

export function windowStart(now: Date): Date {
  return new Date(now.getTime() - APY_WINDOW_DAYS * DAY_MS)
}

/** The sandbox venue's NAV after whole days of growth at `dailyRatePpb`, rounded down each day. */
export function grownNav(nav: bigint, fromMs: number, toMs: number, dailyRatePpb: bigint): bigint {
  const days = Math.max(0, Math.floor((toMs - fromMs) / DAY_MS))
  let value = nav
  // A bound on the loop: a century of days.
  for (let day = 0; day < Math.min(days, 36_600); day++) value = (value * (1_000_000_000n + dailyRatePpb)) / 1_000_000_000n
  return value
}

/** A sandbox transaction digest: 32 bytes in base58, derived from what it stands for, so a retry names the same one. */
export function sandboxDigest(...parts: string[]): string {
  return base58.encode(new Uint8Array(Bun.SHA256.hash(parts.join('\u0000')) as Uint8Array))
}
