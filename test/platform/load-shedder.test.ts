import { describe, expect, test } from 'bun:test'
import { DEFAULT_SHEDDING, LoadShedder } from '../../server/platform/load-shedder.ts'
import { LoopLag } from '../../server/platform/loop-lag.ts'

/** A shedder whose draws are given: `draws` are returned in turn, then 0.999. */
function shedderWith(draws: number[] = []) {
  return new LoadShedder(DEFAULT_SHEDDING, () => draws.shift() ?? 0.999)
}

describe('load shedding', () => {
  test('one late tick is a stall and sheds nothing; late tick after tick is a standing lateness and sheds a growing share', () => {
    const shedder = shedderWith()
    // A full garbage collection or one slow step: the next tick is on time again.
    shedder.observe(90)
    shedder.observe(0)
    shedder.observe(2)
    expect(shedder.currentShare).toBe(0)
    // The thread never catches up: every tick late.
    shedder.observe(DEFAULT_SHEDDING.lateMs + 1)
    expect(shedder.currentShare).toBe(0)
    shedder.observe(DEFAULT_SHEDDING.lateMs + 1)
    expect(shedder.currentShare).toBe(DEFAULT_SHEDDING.stepUp)
    for (let tick = 0; tick < 10; tick++) shedder.observe(40)
    expect(shedder.currentShare).toBe(1)
  })

  test('the share falls back to nothing once ticks are on time, one step a tick', () => {
    const shedder = shedderWith()
    for (let tick = 0; tick < 6; tick++) shedder.observe(50)
    expect(shedder.currentShare).toBe(1)
    shedder.observe(1)
    expect(shedder.currentShare).toBeCloseTo(1 - DEFAULT_SHEDDING.stepDown)
    // A late tick between ones on time starts a new run: it does not raise the share by itself.
    shedder.observe(50)
    expect(shedder.currentShare).toBeCloseTo(1 - DEFAULT_SHEDDING.stepDown)
    for (let tick = 0; tick < Math.ceil(1 / DEFAULT_SHEDDING.stepDown); tick++) shedder.observe(0)
    expect(shedder.currentShare).toBe(0)
  })

  test('sheds the current share of requests, and counts what it shed', () => {
    const shedder = shedderWith([0.1, 0.3, 0.2, 0.9])
    expect(shedder.shouldShed()).toBe(false)
    shedder.observe(50)
    shedder.observe(50)
    expect(shedder.currentShare).toBe(0.25)
    // Draws under the share are shed.
    expect([shedder.shouldShed(), shedder.shouldShed(), shedder.shouldShed(), shedder.shouldShed()]).toEqual([true, false, true, false])
    expect(shedder.shed).toBe(2)
  })

  test("the event loop's own ticks feed it: a thread kept busy tick after tick starts shedding", async () => {
    const shedder = new LoadShedder()
    const lag = new LoopLag((lagMs) => shedder.observe(lagMs))
    lag.start()
    try {
      await Bun.sleep(30)
      // Busy for 30 ms at a time with only a moment between: the loop's ticks all fire late.
      for (let turn = 0; turn < 12; turn++) {
        const busyUntil = performance.now() + 30
        while (performance.now() < busyUntil) {
          // Holds the event loop, as a flood of requests would.
        }
        await Bun.sleep(1)
      }
      expect(shedder.currentShare).toBeGreaterThan(0)
    } finally {
      lag.stop()
    }
  })
})
