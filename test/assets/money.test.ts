import { describe, expect, test } from 'bun:test'
import { ApiError } from '../../server/lib/errors.ts'
import { formatAmount, parseAmount } from '../../server/lib/money.ts'

const FIELD = 'amount'

function refusal(value: unknown, decimals = 6): ApiError {
  try {
    parseAmount(value, decimals, FIELD)
  } catch (error) {
    if (error instanceof ApiError) return error
    throw error
  }
  throw new Error(`parseAmount accepted ${JSON.stringify(value)}`)
}

describe('parseAmount refuses what is not a plain positive decimal string', () => {
  test.each<[string, unknown, number?]>([
    ['more decimals than the asset has', '1.0000001'],
    ['more decimals than a 2-decimal asset has', '1.001', 2],
    ['any decimals on a 0-decimal asset', '1.0', 0],
    ['zero', '0'],
    ['zero with decimals', '0.000000'],
    ['a negative amount', '-1'],
    ['a negative zero', '-0'],
    ['an explicit plus sign', '+1'],
    ['an exponent', '1e3'],
    ['an upper-case exponent', '1E3'],
    ['a decimal exponent', '1.5e2'],
    ['leading zeros', '007'],
    ['a leading zero before a fraction digit run', '00.5'],
    ['a leading space', ' 1'],
    ['a trailing space', '1 '],
    ['a trailing newline', '1\n'],
    ['a thousands separator', '1,000'],
    ['an underscore separator', '1_000'],
    ['a bare decimal point', '1.'],
    ['a missing whole part', '.5'],
    ['hexadecimal', '0x10'],
    ['Infinity', 'Infinity'],
    ['NaN', 'NaN'],
    ['an empty string', ''],
    ['non-ASCII digits', '١٢'],
    ['an absurd whole part', '1'.repeat(16)],
    ['a very long fraction', `1.${'0'.repeat(10_000)}`],
    ['a JSON number', 12.5],
    ['a JSON integer', 100],
    ['a bigint', 100n],
    ['null', null],
    ['an object', { value: '1' }],
  ])('%s', (_name, value, decimals = 6) => {
    const error = refusal(value, decimals)
    expect(error.code).toBe('invalid_request')
    expect(error.field).toBe(FIELD)
    // The message never echoes an unbounded input back.
    expect(error.message.length).toBeLessThan(200)
  })
})

describe('parseAmount and formatAmount round-trip valid amounts', () => {
  test.each<[string, number, bigint, string]>([
    ['1', 6, 1_000_000n, '1.000000'],
    ['12.5', 6, 12_500_000n, '12.500000'],
    ['0.000001', 6, 1n, '0.000001'],
    ['0.1', 6, 100_000n, '0.100000'],
    ['999999999999999.999999', 6, 999_999_999_999_999_999_999n, '999999999999999.999999'],
    ['10.50', 2, 1050n, '10.50'],
    ['7', 0, 7n, '7'],
  ])('"%s" with %d decimals is %p minor units, formatted %s', (input, decimals, minor, formatted) => {
    expect(parseAmount(input, decimals, FIELD)).toBe(minor)
    expect(formatAmount(minor, decimals)).toBe(formatted)
    expect(parseAmount(formatAmount(minor, decimals), decimals, FIELD)).toBe(minor)
  })

  test('zero is accepted only when the caller allows it', () => {
    expect(parseAmount('0', 6, FIELD, { allowZero: true })).toBe(0n)
    expect(parseAmount('0.00', 6, FIELD, { allowZero: true })).toBe(0n)
    expect(refusal('0').field).toBe(FIELD)
  })

  test('formatAmount keeps the sign of negative minor units', () => {
    expect(formatAmount(-1n, 6)).toBe('-0.000001')
    expect(formatAmount(-12_500_000n, 6)).toBe('-12.500000')
    expect(formatAmount(0n, 6)).toBe('0.000000')
  })

  test('the field named in a refusal is the one the caller passed', () => {
    expect(refusal('1e3').field).toBe(FIELD)
    try {
      parseAmount('1e3', 6, 'legs.0.amount')
      throw new Error('accepted')
    } catch (error) {
      expect((error as ApiError).field).toBe('legs.0.amount')
    }
  })
})
