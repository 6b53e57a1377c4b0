import { describe, expect, test } from 'bun:test'
import { Deadlines } from '../../server/lib/deadlines.ts'

describe('deadlines (fired by their timer or from the request path, whichever comes first)', () => {
  test('fireDue fires what is due, earliest first, once each, and nothing before its time', () => {
    let now = 1_000
    const deadlines = new Deadlines(() => now)
    const fired: string[] = []
    deadlines.arm(1_030, () => fired.push('c'))
    deadlines.arm(1_010, () => fired.push('a'))
    deadlines.arm(1_020, () => fired.push('b'))
    deadlines.arm(5_000, () => fired.push('late'))
    deadlines.fireDue()
    expect(fired).toEqual([])
    now = 1_025
    deadlines.fireDue()
    expect(fired).toEqual(['a', 'b'])
    deadlines.fireDue()
    expect(fired).toEqual(['a', 'b'])
    now = 1_030
    deadlines.fireDue()
    expect(fired).toEqual(['a', 'b', 'c'])
    expect(deadlines.size).toBe(1)
  })

  test('a cancelled deadline never fires, and leaves by its time', () => {
    let now = 0
    const deadlines = new Deadlines(() => now)
    const fired: number[] = []
    const first = deadlines.arm(10, () => fired.push(1))
    deadlines.arm(20, () => fired.push(2))
    deadlines.cancel(first)
    now = 25
    deadlines.fireDue()
    expect(fired).toEqual([2])
    expect(deadlines.size).toBe(0)
  })

  test('when the timer fires, the cancelled deadlines ahead of the earliest live one leave with it, and the timer waits for that one', async () => {
    // A budget is cancelled as soon as its authorization is answered: the timer must not wake the
    // loop for each cancelled one in turn.
    const deadlines = new Deadlines()
    const startedAt = performance.now()
    const fired: string[] = []
    const cancelled = Array.from({ length: 50 }, (_, index) => deadlines.arm(startedAt + 20 + index, () => fired.push(`cancelled ${index}`)))
    deadlines.arm(startedAt + 400, () => fired.push('live'))
    const after = Array.from({ length: 10 }, (_, index) => deadlines.arm(startedAt + 410 + index, () => fired.push(`after ${index}`)))
    for (const deadline of [...cancelled, ...after]) deadlines.cancel(deadline)
    await Bun.sleep(40)
    // The timer fired at the first cancelled one's time: all fifty left, the live one is the head.
    expect(fired).toEqual([])
    expect(deadlines.size).toBe(11)
    await Bun.sleep(startedAt + 400 - performance.now() + 30)
    expect(fired).toEqual(['live'])
    expect(deadlines.size).toBe(0)
  })

  test('many deadlines in any order fire in order of their time', () => {
    let now = 0
    const deadlines = new Deadlines(() => now)
    const fired: number[] = []
    const times = Array.from({ length: 500 }, (_, index) => (index * 7919) % 1000)
    for (const at of times) deadlines.arm(at, () => fired.push(at))
    for (now = 0; now <= 1000; now += 37) deadlines.fireDue()
    expect(fired).toEqual([...times].sort((a, b) => a - b))
  })

  test('with no request to fire them, the timer does, and re-arms for the next', async () => {
    const deadlines = new Deadlines()
    const startedAt = performance.now()
    const firedAfter: number[] = []
    deadlines.arm(startedAt + 40, () => firedAfter.push(performance.now() - startedAt))
    deadlines.arm(startedAt + 20, () => firedAfter.push(performance.now() - startedAt))
    await Bun.sleep(80)
    expect(firedAfter.length).toBe(2)
    expect(firedAfter[0]).toBeGreaterThanOrEqual(19)
    expect(firedAfter[1]).toBeGreaterThanOrEqual(39)
  })

  test('inside a turn that runs past a deadline, a request read fires it before any timer runs', async () => {
    const deadlines = new Deadlines()
    let timerRan = false
    setTimeout(() => (timerRan = true), 0)
    let firedWhileTimersWaited: boolean | undefined
    deadlines.arm(performance.now() + 5, () => (firedWhileTimersWaited = !timerRan))
    // One long turn: the thread busy past the deadline, as when it reads a flood of requests.
    const until = performance.now() + 20
    while (performance.now() < until) {}
    deadlines.fireDue()
    expect(firedWhileTimersWaited).toBe(true)
    await Bun.sleep(5)
    expect(timerRan).toBe(true)
  })
})
