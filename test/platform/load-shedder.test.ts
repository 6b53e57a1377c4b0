import { describe, expect, test } from 'bun:test'
import { DEFAULT_SHEDDING, LoadShedder } from '../../server/platform/load-shedder.ts'
import { LoopLag, threadBusyMs } from '../../server/platform/loop-lag.ts'

/** A shedder whose draws are given: `draws` are returned in turn, then 0.999. */
function shedderWith(draws: number[] = []) {
  return new LoadShedder(DEFAULT_SHEDDING, () => draws.shift() ?? 0.999)
}

describe('load shedding', () => {
  test('a request read while the loop\'s next tick is overdue by overdueMs or more is shed whatever the share, and counted apart', () => {
    const shedder = shedderWith()
    expect(shedder.currentShare).toBe(0)
    expect(shedder.mayShed(0)).toBe(false)
    expect(shedder.mayShed(DEFAULT_SHEDDING.overdueMs - 1)).toBe(false)
    expect(shedder.shouldShed(DEFAULT_SHEDDING.overdueMs - 1)).toBe(false)
    expect(shedder.mayShed(DEFAULT_SHEDDING.overdueMs)).toBe(true)
    expect(shedder.shouldShed(DEFAULT_SHEDDING.overdueMs)).toBe(true)
    expect(shedder.shouldShed(5 * DEFAULT_SHEDDING.overdueMs)).toBe(true)
    expect([shedder.shed, shedder.shedOverdue]).toEqual([2, 2])
    // The share is the ticks' alone: a long turn does not raise it.
    expect(shedder.currentShare).toBe(0)
    // A turn overdue because the thread was stopped rather than busy sheds nothing for it.
    expect(shedder.shouldShed(DEFAULT_SHEDDING.overdueMs, () => DEFAULT_SHEDDING.busyShare / 2)).toBe(false)
    expect(shedder.shouldShed(DEFAULT_SHEDDING.overdueMs, () => DEFAULT_SHEDDING.busyShare)).toBe(true)
    expect(shedder.shouldShed(DEFAULT_SHEDDING.overdueMs, () => undefined)).toBe(true)
    expect([shedder.shed, shedder.shedOverdue]).toEqual([4, 4])
    // With a share, a draw under it sheds in an ordinary turn, counted as shed but not overdue.
    const sharing = shedderWith([0.1])
    for (let tick = 0; tick < 6; tick++) sharing.observe(50)
    expect(sharing.mayShed(0)).toBe(true)
    expect(sharing.shouldShed(0)).toBe(true)
    expect([sharing.shed, sharing.shedOverdue]).toEqual([1, 0])
  })

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

  test('the share falls from all to none over a second of ticks on time (the refusals\' Retry-After), not between two floods', () => {
    const shedder = shedderWith()
    for (let tick = 0; tick < 6; tick++) shedder.observe(50)
    expect(shedder.currentShare).toBe(1)
    // 200 ms on time: a thread that has read one flood keeps shedding most of the next.
    for (let tick = 0; tick < 20; tick++) shedder.observe(0)
    expect(shedder.currentShare).toBeCloseTo(0.8)
    // Late again tick after tick: back to all within a few ticks, from where it was.
    shedder.observe(50)
    shedder.observe(50)
    expect(shedder.currentShare).toBe(1)
    // A whole second (100 ticks of 10 ms) on time: nothing shed.
    for (let tick = 0; tick < 99; tick++) shedder.observe(0)
    expect(shedder.currentShare).toBeGreaterThan(0)
    shedder.observe(0)
    expect(shedder.currentShare).toBe(0)
  })

  test('a late tick raises the share only while the lateness is not shrinking: a backlog being read down keeps the share it has', () => {
    const shedder = shedderWith()
    shedder.observe(20)
    shedder.observe(30)
    expect(shedder.currentShare).toBe(DEFAULT_SHEDDING.stepUp)
    // Still late, but less late tick after tick: the backlog is being read down.
    shedder.observe(25)
    shedder.observe(18)
    shedder.observe(12)
    expect(shedder.currentShare).toBe(DEFAULT_SHEDDING.stepUp)
    // Later again (the backlog grows), or as late as before (it does not shrink): raised.
    shedder.observe(40)
    expect(shedder.currentShare).toBe(2 * DEFAULT_SHEDDING.stepUp)
    shedder.observe(40)
    expect(shedder.currentShare).toBe(3 * DEFAULT_SHEDDING.stepUp)
    // The first late tick after ones on time starts a new run, which needs its second tick as ever.
    shedder.observe(0)
    const afterOnTime = shedder.currentShare
    shedder.observe(15)
    expect(shedder.currentShare).toBe(afterOnTime)
    shedder.observe(15)
    expect(shedder.currentShare).toBeCloseTo(afterOnTime + DEFAULT_SHEDDING.stepUp)
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

  test('a late tick counts only if the thread was busy meanwhile: one stopped rather than busy sheds nothing', () => {
    const shedder = shedderWith()
    const notBusy = DEFAULT_SHEDDING.busyShare - 0.1
    // The host took the core away, or a blocking call: late tick after tick, the thread mostly idle.
    for (let tick = 0; tick < 10; tick++) shedder.observe(60, notBusy)
    expect(shedder.currentShare).toBe(0)
    expect(shedder.stalls).toBe(10)
    // A stall between busy late ticks breaks their run, as a tick on time does.
    shedder.observe(60, 1)
    shedder.observe(60, notBusy)
    shedder.observe(60, 1)
    expect(shedder.currentShare).toBe(0)
    // Busy (running or waiting for a core) tick after tick: a standing lateness.
    shedder.observe(60, DEFAULT_SHEDDING.busyShare)
    expect(shedder.currentShare).toBe(DEFAULT_SHEDDING.stepUp)
    // Where the busy share is unknown, a tick counts by its lateness alone.
    shedder.observe(60)
    expect(shedder.currentShare).toBe(2 * DEFAULT_SHEDDING.stepUp)
    expect(shedder.stalls).toBe(11)
  })

  test("the event loop's own ticks feed it: a thread kept busy tick after tick starts shedding", async () => {
    const shedder = new LoadShedder()
    const lag = new LoopLag((lagMs, busyShare) => shedder.observe(lagMs, busyShare))
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

  test("a thread stopped tick after tick (here by a blocking call) sheds nothing, read from the thread's own schedstat", async () => {
    // Linux reports each thread's time running and waiting for a core; the product runs there.
    expect(process.platform === 'linux' ? threadBusyMs() : 0).toBeNumber()
    const shedder = new LoadShedder()
    const shares: number[] = []
    const lag = new LoopLag((lagMs, busyShare) => {
      if (lagMs > DEFAULT_SHEDDING.lateMs && busyShare !== undefined) shares.push(busyShare)
      shedder.observe(lagMs, busyShare)
    })
    lag.start()
    try {
      await Bun.sleep(30)
      for (let turn = 0; turn < 12; turn++) {
        // Holds the event loop without using the core: every tick fires late.
        Bun.sleepSync(30)
        await Bun.sleep(1)
      }
      expect(shares.length).toBeGreaterThanOrEqual(8)
      // Waiting for a core counts as busy, so on a machine loaded by other processes a tick may
      // read busy now and then; most read as a thread that neither ran nor waited.
      expect(shares.filter((share) => share < DEFAULT_SHEDDING.busyShare).length).toBeGreaterThanOrEqual(Math.ceil(shares.length * 0.75))
      expect(shedder.currentShare).toBe(0)
      expect(shedder.stalls).toBeGreaterThanOrEqual(8)
    } finally {
      lag.stop()
    }
  })
})
