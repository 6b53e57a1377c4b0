/**
 * `date.toISOString()`, remembered for the last few instants: on the hot path one instant is
 * spelled many times (a payment's creation in its row, its event, its answer; its expiry likewise),
 * and many requests share a millisecond under load.
 */
const SLOTS = 4
const instants = new Float64Array(SLOTS).fill(Number.NaN)
const spelled: string[] = new Array(SLOTS).fill('')
let next = 0

export function isoOf(date: Date): string {
  const instant = date.getTime()
  for (let slot = 0; slot < SLOTS; slot++) if (instants[slot] === instant) return spelled[slot]!
  const text = date.toISOString()
  instants[next] = instant
  spelled[next] = text
  next = (next + 1) % SLOTS
  return text
}
