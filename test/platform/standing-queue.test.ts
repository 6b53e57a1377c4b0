import { describe, expect, test } from 'bun:test'
import { StandingQueue } from '../../server/lib/standing-queue.ts'

describe('standing queue (CoDel-style: above the target for a whole interval)', () => {
  test('a wait above the target stands only once it has stayed above for the interval', () => {
    const queue = new StandingQueue(200, 100)
    expect(queue.observe(250, 0)).toBe(false)
    expect(queue.observe(300, 60)).toBe(false)
    expect(queue.observe(260, 99)).toBe(false)
    expect(queue.observe(240, 100)).toBe(true)
  })

  test('a burst that dips under the target within the interval never stands', () => {
    const queue = new StandingQueue(200, 100)
    for (let now = 0; now < 1000; now += 40) {
      // Up over the target and back under it, every 80 ms: a closed loop or a burst, not past capacity.
      expect(queue.observe(now % 80 === 0 ? 260 : 180, now)).toBe(false)
    }
  })

  test('standing holds while the wait hovers around the target, and ends once it falls to half of it', () => {
    const queue = new StandingQueue(200, 100)
    queue.observe(300, 0)
    expect(queue.observe(300, 100)).toBe(true)
    // Admission holds the queue at about its target: readings just under and over it.
    expect(queue.observe(190, 110)).toBe(true)
    expect(queue.observe(205, 120)).toBe(true)
    expect(queue.observe(150, 130)).toBe(true)
    // Drained: the load is back under capacity.
    expect(queue.observe(100, 140)).toBe(false)
    expect(queue.observe(210, 150)).toBe(false)
  })

  test('an endless wait (a writer that cannot commit) stands after the interval like any other', () => {
    const queue = new StandingQueue(200, 100)
    expect(queue.observe(Number.POSITIVE_INFINITY, 5)).toBe(false)
    expect(queue.observe(Number.POSITIVE_INFINITY, 105)).toBe(true)
    expect(queue.observe(0, 106)).toBe(false)
  })
})
