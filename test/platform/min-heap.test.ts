import { describe, expect, test } from 'bun:test'
import { heapPop, heapPush } from '../../server/lib/min-heap.ts'

describe('min-heap', () => {
  test('pops in order, whatever the order pushed, duplicates included', () => {
    const heap: number[] = []
    const less = (a: number, b: number) => a < b
    const values = Array.from({ length: 1000 }, (_, index) => (index * 7919) % 257)
    for (const value of values) heapPush(heap, value, less)
    const popped: number[] = []
    for (let value = heapPop(heap, less); value !== undefined; value = heapPop(heap, less)) popped.push(value)
    expect(popped).toEqual([...values].sort((a, b) => a - b))
    expect(heapPop(heap, less)).toBeUndefined()
  })

  test('orders objects by the comparison given, interleaving pushes and pops', () => {
    const heap: Array<{ at: number }> = []
    const earlier = (a: { at: number }, b: { at: number }) => a.at < b.at
    for (const at of [5, 1, 4]) heapPush(heap, { at }, earlier)
    expect(heapPop(heap, earlier)!.at).toBe(1)
    heapPush(heap, { at: 2 }, earlier)
    expect([heapPop(heap, earlier)!.at, heapPop(heap, earlier)!.at, heapPop(heap, earlier)!.at]).toEqual([2, 4, 5])
  })
})
