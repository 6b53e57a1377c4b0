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
})
