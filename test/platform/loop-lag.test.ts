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
      expect(lag.currentMs()).toBeGreaterThanOrEqual(60)
      // Two windows of 200 ms later the block is no longer reported.
      await Bun.sleep(500)
      expect(lag.currentMs()).toBeLessThan(60)
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
