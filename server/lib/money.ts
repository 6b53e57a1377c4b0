import { ApiError } from './errors.ts'

/** Amounts never exceed this many whole units; anything larger is a mistake, not money. */
const MAX_WHOLE_DIGITS = 15

/**
 * Parses a decimal string at the API edge into minor units. Refuses numbers sent as JSON numbers,
 * exponents, signs, leading zeros, and more decimals than the asset has.
 */
export function parseAmount(value: unknown, decimals: number, field: string, options: { allowZero?: boolean } = {}): bigint {
  if (typeof value !== 'string') {
    throw new ApiError('invalid_request', 'Amounts are decimal strings, for example "12.50"', { field })
  }
  const match = /^(0|[1-9]\d*)(?:\.(\d+))?$/.exec(value)
  if (!match) {
    throw new ApiError('invalid_request', `"${value.slice(0, 40)}" is not a plain positive decimal amount`, { field })
  }
  const whole = match[1]!
  const fraction = match[2] ?? ''
  if (whole.length > MAX_WHOLE_DIGITS) {
    throw new ApiError('invalid_request', `Amounts have at most ${MAX_WHOLE_DIGITS} whole digits`, { field })
  }
  if (fraction.length > decimals) {
    // Only the start of the value is echoed: the fraction may be arbitrarily long.
    throw new ApiError('invalid_request', `This asset has ${decimals} decimals; "${value.slice(0, 40)}" has ${fraction.length}`, { field })
  }
  const minor = BigInt(whole + fraction.padEnd(decimals, '0'))
  if (minor === 0n && !options.allowZero) {
    throw new ApiError('invalid_request', 'The amount must be greater than zero', { field })
  }
  return minor
}

/** Formats minor units as a decimal string with exactly the asset's decimals ("12.500000"). */
export function formatAmount(minor: bigint, decimals: number): string {
  const negative = minor < 0n
  const digits = (negative ? -minor : minor).toString().padStart(decimals + 1, '0')
  const whole = digits.slice(0, digits.length - decimals)
  const fraction = digits.slice(digits.length - decimals)
  const text = decimals === 0 ? whole : `${whole}.${fraction}`
  return negative ? `-${text}` : text
}
