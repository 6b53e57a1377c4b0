import { describe, expect, test } from 'bun:test'
import { requestSlot } from '../../server/platform/request-slot.ts'

describe('requestSlot', () => {
  test('keeps a value per request, like the weak map it replaces', () => {
    const arrivals = requestSlot<number>('test.arrival')
    const first = new Request('http://kassa.test/a')
    const second = new Request('http://kassa.test/b')
    expect(arrivals.get(first)).toBeUndefined()
    expect(arrivals.has(first)).toBe(false)
    arrivals.set(first, 12.5)
    expect(arrivals.get(first)).toBe(12.5)
    expect(arrivals.has(first)).toBe(true)
    expect(arrivals.get(second)).toBeUndefined()
    arrivals.set(first, 0)
    expect(arrivals.has(first)).toBe(true)
    arrivals.delete(first)
    expect(arrivals.has(first)).toBe(false)
    expect(arrivals.get(first)).toBeUndefined()
  })

  test('slots are independent, even with the same name, and invisible to the request\'s own keys', () => {
    const a = requestSlot<string>('test.same')
    const b = requestSlot<string>('test.same')
    const request = new Request('http://kassa.test/', { method: 'POST', headers: { 'x-test': '1' }, body: '{}' })
    a.set(request, 'from a')
    expect(b.get(request)).toBeUndefined()
    b.set(request, 'from b')
    expect([a.get(request), b.get(request)]).toEqual(['from a', 'from b'])
    expect(Object.keys(request)).not.toContain('test.same')
    expect(JSON.stringify(Object.keys(request))).not.toContain('from')
    // The request itself is untouched.
    expect(request.method).toBe('POST')
    expect(request.headers.get('x-test')).toBe('1')
  })
})
