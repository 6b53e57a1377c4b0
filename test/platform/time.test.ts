import { expect, test } from 'bun:test'
import { isoOf } from '../../server/lib/time.ts'

test('isoOf spells every instant as toISOString does, whatever it remembers', () => {
  const base = Date.UTC(2026, 10, 22, 6, 0, 0, 0)
  const instants = [base, base, base + 1, base + 86_400_000, base, base + 2, base + 3, base + 4, base, -1, 0, 8.64e15]
  for (let round = 0; round < 3; round++) for (const instant of instants) expect(isoOf(new Date(instant))).toBe(new Date(instant).toISOString())
})
