import { describe, expect, test } from 'bun:test'
import { GenerationalMap } from '../../server/lib/generational-map.ts'

describe('generational map', () => {
  test('answers like a Map across segments: get, has, replace in place, delete, size, iteration in insertion order', () => {
    const map = new GenerationalMap<{ n: number }>(4)
    const reference = new Map<string, { n: number }>()
    for (let n = 0; n < 50; n++) {
      const value = { n }
      map.set(`k${n}`, value)
      reference.set(`k${n}`, value)
    }
    expect(map.size).toBe(50)
    expect(map.segments).toBeGreaterThan(1)
    // Replacing a sealed key's value keeps one entry, in its place.
    const replaced = { n: 303 }
    map.set('k3', replaced)
    reference.set('k3', replaced)
    for (const n of [0, 7, 8, 9, 10, 11, 49, 25]) {
      expect(map.delete(`k${n}`)).toBe(true)
      reference.delete(`k${n}`)
    }
    expect(map.delete('k0')).toBe(false)
    expect(map.delete('missing')).toBe(false)
    expect(map.size).toBe(reference.size)
    for (const [key, value] of reference) {
      expect(map.get(key)).toBe(value)
      expect(map.has(key)).toBe(true)
    }
    expect(map.get('k0')).toBeUndefined()
    expect(map.has('k49')).toBe(false)
    expect([...map].map(([key]) => key)).toEqual([...reference.keys()])
    expect([...map.values()]).toEqual([...reference.values()])
    map.clear()
    expect(map.size).toBe(0)
    expect(map.get('k3')).toBeUndefined()
    expect(map.segments).toBe(0)
  })

  test('segments emptied by deletion are dropped, and sparse ones are merged as new ones seal, so their count follows the live entries', () => {
    const map = new GenerationalMap<number>(100)
    // A day of authorizations of which one in a hundred is never captured: 100,000 added, each
    // captured soon after except every hundredth.
    for (let n = 0; n < 100_000; n++) {
      map.set(`pay_${n}`, n)
      if (n >= 50 && (n - 50) % 100 !== 0) map.delete(`pay_${n - 50}`)
    }
    // 1,050 live (the thousand kept and the last fifty): a few tens of segments, not the 1,000 sealed.
    expect(map.size).toBe(1_050)
    expect(map.segments).toBeLessThanOrEqual(Math.ceil((2 * map.size) / 100) + 2)
    for (let n = 0; n < 99_950; n += 100) expect(map.get(`pay_${n}`)).toBe(n)
    for (let n = 99_950; n < 100_000; n++) expect(map.get(`pay_${n}`)).toBe(n)
    expect(map.get('pay_1')).toBeUndefined()
  })

  test('keys added in any order are found once: a key below the greatest sealed one is looked for in every segment', () => {
    const map = new GenerationalMap<number>(3)
    // Descending, then ascending, then the same keys again with new values.
    const keys = ['m', 'l', 'k', 'j', 'i', 'a', 'b', 'c', 'x', 'y', 'z', 'n']
    keys.forEach((key, index) => map.set(key, index))
    keys.forEach((key, index) => map.set(key, 100 + index))
    expect(map.size).toBe(keys.length)
    for (const [index, key] of keys.entries()) expect(map.get(key)).toBe(100 + index)
    expect([...map].length).toBe(keys.length)
    expect(map.get('zz')).toBeUndefined()
    expect(map.delete('a')).toBe(true)
    expect(map.has('a')).toBe(false)
    expect(map.size).toBe(keys.length - 1)
  })
})
