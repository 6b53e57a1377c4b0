import { describe, expect, test } from 'bun:test'
import { LoopLag } from '../../server/platform/loop-lag.ts'

describe('event-loop lag', () => {
  test('reports how long the loop was blocked, and forgets it after its window', async () => {
    const lag = new LoopLag()
    lag.start()
    try {
      await Bun.sleep(50)
      const blockedUntil = performance.now() + 80
      while (performance.now() < blockedUntil) {
        // Holds the event loop, as a burst of synchronous work would.
      }
      await Bun.sleep(20)
      const reported = lag.currentMs()
      expect(reported).toBeGreaterThanOrEqual(60)
      // Two windows of 200 ms later the block is no longer reported. A machine other processes keep
      // busy may make a lateness of its own meanwhile, but hardly one as long as the block.
      await Bun.sleep(500)
      expect(lag.currentMs()).toBeLessThan(reported)
    } finally {
      lag.stop()
    }
  })

  test('inside an overdue turn the clock tells a thread at work from one that was stopped, from its busy clock', () => {
    let busyMs = 0
    const lag = new LoopLag(() => {}, () => busyMs)
    // Without a listener the clock keeps no busy clock.
    expect(new LoopLag().busyShareSinceTick()).toBeUndefined()
    lag.start()
    try {
      Bun.sleepSync(100)
      // Stopped: 5 ms of work in over 100 ms.
      busyMs = 5
      expect(lag.busyShareSinceTick()!).toBeLessThan(0.1)
      // At work the whole time.
      busyMs = 1000
      expect(lag.busyShareSinceTick()).toBe(1)
    } finally {
      lag.stop()
    }
    expect(lag.busyShareSinceTick()).toBeUndefined()
  })

  test('the lateness since a moment counts only what fell after it', async () => {
    const lag = new LoopLag()
    lag.start()
    try {
      await Bun.sleep(25)
      const blockedFrom = performance.now()
      Bun.sleepSync(150)
      // The tick the block held back fires now, at least 140 ms late.
      await Bun.sleep(20)
      const whole = lag.lateSinceMs(blockedFrom - 1)
      expect(whole).toBeGreaterThanOrEqual(140)
      // From 100 ms into the block, only what came after: what a request arriving then waited.
      const fromInside = lag.lateSinceMs(blockedFrom + 100)
      expect(fromInside).toBeGreaterThanOrEqual(40)
      expect(whole - fromInside).toBeGreaterThanOrEqual(80)
      // From after that tick, the block is not counted at all.
      const after = performance.now()
      await Bun.sleep(30)
      expect(lag.lateSinceMs(after)).toBeLessThan(whole - 80)
      // The lag of the last 200 to 400 ms still holds it whole.
      expect(lag.currentMs()).toBeGreaterThanOrEqual(140)
    } finally {
      lag.stop()
    }
  })

  test('while a turn runs, its next tick\'s lateness counts from the moment asked about', () => {
    const lag = new LoopLag()
    expect(lag.lateSinceMs(performance.now())).toBe(0)
    lag.start()
    try {
      const from = performance.now()
      Bun.sleepSync(120)
      // No tick has fired: the one due within 10 ms of the start is overdue by at least 110 ms.
      expect(lag.lateSinceMs(from - 1000)).toBeGreaterThanOrEqual(110)
      expect(lag.lateSinceMs(from + 60)).toBeLessThanOrEqual(performance.now() - (from + 60))
    } finally {
      lag.stop()
    }
  })

  test('the loop\'s clock tells how long the current turn has kept its next tick waiting', async () => {
    const lag = new LoopLag()
    expect(lag.overdueMs()).toBe(0)
    lag.start()
    try {
      await Bun.sleep(25)
      // A tick was due at most 10 ms after the last one ran: 150 ms in one turn leaves it at least 140 ms overdue.
      Bun.sleepSync(150)
      expect(lag.overdueMs()).toBeGreaterThanOrEqual(140)
    } finally {
      lag.stop()
    }
    expect(lag.overdueMs()).toBe(0)
  })
})
