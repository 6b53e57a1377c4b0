import { describe, expect, test } from 'bun:test'
import { accrue, DAY_MS, type DayPrices, type Position } from '../../server/modules/earning/accrual-math.ts'

const ONE = 10n ** 18n
const START = Date.parse('2026-03-10T00:00:00Z')
const HOUR = 3_600_000
const price = (text: string) => BigInt(text.replace('.', '').padEnd(19, '0').slice(0, 19))

function position(sharesOpen: bigint, changes: Array<[number, bigint]> = []): Position {
  return { orgId: 'org_a', accountId: 'acct_a', sharesOpen, changes: changes.map(([hours, delta]) => ({ atMs: START + hours * HOUR, delta })) }
}

function prices(open: string, points: Array<[number, string]> = []): DayPrices {
  return { open: price(open), points: points.map(([hours, value]) => ({ atMs: START + hours * HOUR, price: price(value) })) }
}

describe('one account\'s accrual for a day', () => {
  // Each row: what the account held and how the price moved, and the figures expected.
  const cases: Array<{ name: string; position: Position; prices: DayPrices; bps: number; expected: Record<string, bigint> }> = [
    {
      name: 'a steady position earns the day\'s move; fee = net × bps ÷ (10000 − bps), rounded down',
      position: position(1_000_000_000n),
      prices: prices('1', [[6, '1.001']]),
      bps: 1000,
      expected: { timeWeightedShares: 1_000_000_000n, net: 1_000_000n, fee: 111_111n, gross: 1_111_111n, sharesClose: 1_000_000_000n },
    },
    {
      name: 'a fraction of a unit of net goes to the account (rounded up)',
      position: position(333n),
      prices: prices('1', [[1, '1.001']]),
      bps: 0,
      // 333 × 0.001 = 0.333 of a minor unit.
      expected: { net: 1n, fee: 0n, gross: 1n },
    },
    {
      name: 'the fee on a fraction is rounded down to nothing',
      position: position(333n),
      prices: prices('1', [[1, '1.001']]),
      bps: 5000,
      // fee exactly 0.333 × 5000 / 5000 = 0.333 → 0; net 1, gross 1.
      expected: { net: 1n, fee: 0n, gross: 1n },
    },
    {
      name: 'a loss carries no fee and is rounded toward zero',
      position: position(1_000n),
      prices: prices('1', [[3, '0.9995']]),
      bps: 1000,
      // 1000 × −0.0005 = −0.5 → 0 (toward zero, the account's way).
      expected: { net: 0n, fee: 0n, gross: 0n },
    },
    {
      name: 'shares credited at the instant of a move do not earn it; shares held before it do',
      position: position(100n, [[12, 900n]]),
      prices: prices('1', [[12, '1.5']]),
      bps: 0,
      // Only the 100 held before noon earn 0.5 each; the 900 arrive at noon.
      expected: { net: 50n, timeWeightedShares: 100n / 2n + 1000n / 2n, sharesClose: 1000n },
    },
    {
      name: 'shares burnt at a redemption stop earning from then on, and weigh for the time held',
      position: position(1000n, [[6, -600n]]),
      prices: prices('1', [[3, '1.01'], [18, '1.02']]),
      bps: 0,
      // 1000 × 0.01 before the burn, 400 × 0.01 after: 14; weighted 1000 × 6/24 + 400 × 18/24 = 550.
      expected: { net: 14n, timeWeightedShares: 550n, sharesClose: 400n },
    },
    {
      name: 'a 100 % platform fee derives no fee',
      position: position(1000n),
      prices: prices('1', [[3, '1.01']]),
      bps: 10_000,
      expected: { net: 10n, fee: 0n, gross: 10n },
    },
    {
      name: 'no shares all day: all zero',
      position: position(0n),
      prices: prices('1', [[3, '1.01']]),
      bps: 100,
      expected: { net: 0n, fee: 0n, gross: 0n, timeWeightedShares: 0n },
    },
  ]
  for (const row of cases) {
    test(row.name, () => {
      const figures = accrue(row.position, row.prices, START, row.bps)
      expect(figures).toMatchObject(row.expected)
      expect(figures.net).toBe(figures.gross - figures.fee)
    })
  }

  test('across many random days the rounding never favours the platform: fee ≤ exact fee and net ≥ exact net', () => {
    let seed = 7
    const random = (max: number) => ((seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648), seed % max)
    for (let round = 0; round < 2_000; round++) {
      const shares = BigInt(random(1_000_000_000))
      const bps = random(3000)
      const move = BigInt(random(2_000_000_000_000_000)) - 500_000_000_000_000n
      const figures = accrue(position(shares), { open: ONE, points: [{ atMs: START + HOUR, price: ONE + move }] }, START, bps)
      const gainedExact = shares * move
      // net × 10^18 ≥ the exact gain (rounded up), by less than one unit.
      expect(figures.net * ONE >= gainedExact).toBe(true)
      expect(figures.net * ONE - gainedExact < ONE).toBe(true)
      if (gainedExact > 0n) {
        // fee × 10^18 × (10000 − bps) ≤ gain × bps: never more than the exact fee.
        expect(figures.fee * ONE * BigInt(10_000 - bps) <= gainedExact * BigInt(bps)).toBe(true)
        expect((figures.fee + 1n) * ONE * BigInt(10_000 - bps) > gainedExact * BigInt(bps)).toBe(true)
      } else expect(figures.fee).toBe(0n)
      expect(figures.gross - figures.fee).toBe(figures.net)
      expect(figures.timeWeightedShares).toBe(shares)
    }
  })

  test('refuses a share change outside its day', () => {
    expect(() => accrue(position(1n, [[25, 1n]]), prices('1'), START, 0)).toThrow()
    expect(DAY_MS).toBe(86_400_000)
  })
})
