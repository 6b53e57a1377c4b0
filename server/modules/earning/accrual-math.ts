import { assert } from '../../lib/assert.ts'
import { PRICE_ONE } from '../vaults/prices.ts'

export const DAY_MS = 86_400_000
const BPS_ONE = 10_000n

/** An account's shares at the day's start, and how they changed during it. */
export interface Position {
  orgId: string
  accountId: string
  sharesOpen: bigint
  /** Share changes in the day, oldest first: +minted at a deposit settlement, -burnt at a redemption's. */
  changes: Array<{ atMs: number; delta: bigint }>
}

/** The vault's prices over one day: the one in effect at its start, then each new one (at ≤ day end), oldest first. */
export interface DayPrices {
  open: bigint
  points: Array<{ atMs: number; price: bigint }>
}

export interface AccrualFigures {
  sharesOpen: bigint
  sharesClose: bigint
  timeWeightedShares: bigint
  gross: bigint
  fee: bigint
  net: bigint
}

/** Division rounded toward plus infinity (for either sign of the numerator; positive divisor). */
function ceilDiv(numerator: bigint, divisor: bigint): bigint {
  const quotient = numerator / divisor
  return numerator % divisor > 0n ? quotient + 1n : quotient
}

/**
 * One account's accrual for one day of one vault. The share price is net of the platform's fee,
 * so what the price moves add to the shares held is the net yield; the fee is what the platform
 * kept beside it (`net × bps / (10000 − bps)`), and gross = net + fee.
 *
 * Exact first, rounded once: the value gained is summed in fixed point (each price move times the
 * shares held just before it: shares that arrive at a settlement do not earn the move made at that
 * instant), then the fee is rounded down and the net up to whole minor units, so every rounding is
 * against the platform's fee and none against the account; `net = gross − fee` exactly. A loss
 * (the price fell) carries no fee. Time-weighted shares are the shares held, weighted by the time
 * held in the day, rounded down.
 */
export function accrue(position: Position, prices: DayPrices, dayStartMs: number, feeBps: number): AccrualFigures {
  assert(feeBps >= 0 && feeBps <= 10_000, 'a fee in basis points')
  const dayEndMs = dayStartMs + DAY_MS
  let shares = position.sharesOpen
  let gained = 0n
  let weighted = 0n
  if (position.changes.length === 0) {
    const close = prices.points.length === 0 ? prices.open : prices.points[prices.points.length - 1]!.price
    gained = shares * (close - prices.open)
    weighted = shares * BigInt(DAY_MS)
  } else {
    let price = prices.open
    let at = dayStartMs
    let next = 0
    const points = prices.points
    for (const change of position.changes) {
      assert(change.atMs >= dayStartMs && change.atMs < dayEndMs, 'a share change inside its day')
      // A price move at the change's instant applies to the shares held before it.
      while (next < points.length && points[next]!.atMs <= change.atMs) {
        gained += shares * (points[next]!.price - price)
        price = points[next]!.price
        next += 1
      }
      weighted += shares * BigInt(change.atMs - at)
      at = change.atMs
      shares += change.delta
      assert(shares >= 0n, 'shares never go below zero')
    }
    for (; next < points.length; next++) {
      gained += shares * (points[next]!.price - price)
      price = points[next]!.price
    }
    weighted += shares * BigInt(dayEndMs - at)
  }
  const bps = BigInt(feeBps)
  const net = ceilDiv(gained, PRICE_ONE)
  // A 100 % fee leaves the account nothing to gross up from: no fee is derived.
  const fee = gained > 0n && bps < BPS_ONE ? (gained * bps) / (PRICE_ONE * (BPS_ONE - bps)) : 0n
  return { sharesOpen: position.sharesOpen, sharesClose: shares, timeWeightedShares: weighted / BigInt(DAY_MS), gross: net + fee, fee, net }
}

/** The UTC midnight starting a day (YYYY-MM-DD), in milliseconds. */
export function dayStartMs(day: string): number {
  const ms = Date.parse(`${day}T00:00:00.000Z`)
  assert(Number.isFinite(ms), `a day ${day}`)
  return ms
}

export function dayAfter(day: string): string {
  return new Date(dayStartMs(day) + DAY_MS).toISOString().slice(0, 10)
}
