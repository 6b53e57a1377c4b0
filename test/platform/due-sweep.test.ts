import { describe, expect, test } from 'bun:test'
import { DueSweep, earliestWallMs } from '../../server/platform/due-sweep.ts'
import { ManualTimers } from '../support/manual-timers.ts'

/** A sweep on timers the test moves by hand, whose passes are recorded (at the manual clock's time) and answer what `next` says. */
function recorded(options: { backstopMs?: number; minGapMs?: number } = {}) {
  const timers = new ManualTimers()
  const passes: number[] = []
  const state = { next: undefined as number | undefined, fail: false, hold: undefined as Promise<void> | undefined }
  const sweep = new DueSweep({ name: 'test', backstopMs: options.backstopMs ?? 10_000, minGapMs: options.minGapMs ?? 0, wallNowMs: timers.now, timers }, async () => {
    passes.push(timers.now())
    if (state.hold) await state.hold
    if (state.fail) throw new Error('the pass failed on purpose')
    return state.next
  })
  return { sweep, passes, state, timers }
}

describe('DueSweep', () => {
  test('runOnce runs one pass now and answers when it has ended, started or not, after a pass already running', async () => {
    const { sweep, passes, state } = recorded()
    await sweep.runOnce()
    expect(passes).toHaveLength(1)
    let release: () => void = () => {}
    state.hold = new Promise<void>((resolve) => (release = resolve))
    const first = sweep.runOnce()
    const second = sweep.runOnce()
    expect(passes).toHaveLength(2)
    release()
    await Promise.all([first, second])
    expect(passes).toHaveLength(3)
    expect(sweep.busy).toBe(false)
    await sweep.stop()
    await sweep.runOnce()
    expect(passes).toHaveLength(3)
  })

  test('runs a pass at start, then when the work it reported falls due', async () => {
    const { sweep, passes, state, timers } = recorded()
    const started = timers.now()
    state.next = started + 150
    sweep.start()
    await timers.advance(0)
    expect(passes).toEqual([started])
    state.next = undefined
    await timers.advance(149)
    expect(passes).toHaveLength(1)
    await timers.advance(1)
    expect(passes).toEqual([started, started + 150])
    // Nothing pending and a long backstop: no further pass until the backstop.
    await timers.advance(9_999)
    expect(passes).toHaveLength(2)
    await sweep.stop()
  })

  test('with nothing pending it still runs once per backstop', async () => {
    const { sweep, passes, timers } = recorded({ backstopMs: 60 })
    sweep.start()
    await timers.advance(180)
    expect(passes.map((at) => at - passes[0]!)).toEqual([0, 60, 120, 180])
    await sweep.stop()
  })

  test('a wake brings the next pass forward; a later wake does not push it back', async () => {
    const { sweep, passes, timers } = recorded()
    sweep.start()
    await timers.advance(0)
    expect(passes).toHaveLength(1)
    const woken = timers.now()
    sweep.wake(woken + 50)
    sweep.wake(woken + 5_000)
    await timers.advance(49)
    expect(passes).toHaveLength(1)
    await timers.advance(1)
    expect(passes).toEqual([woken, woken + 50])
    await sweep.stop()
  })

  test('a wake for work due now during a pass runs another pass right after it, never two at once', async () => {
    const { sweep, passes, state, timers } = recorded()
    let release!: () => void
    state.hold = new Promise((resolve) => (release = resolve))
    sweep.start()
    await timers.advance(0)
    expect(passes).toHaveLength(1)
    expect(sweep.busy).toBe(true)
    sweep.wake()
    sweep.wake()
    await timers.advance(1_000)
    expect(passes).toHaveLength(1)
    state.hold = undefined
    release()
    await timers.advance(0)
    expect(passes).toHaveLength(2)
    // The two wakes made one more pass, not two.
    await timers.advance(5_000)
    expect(passes).toHaveLength(2)
    await sweep.stop()
  })

  test('work reported as already due is swept again no sooner than the minimum gap', async () => {
    const { sweep, passes, state, timers } = recorded({ minGapMs: 80 })
    state.next = 0
    sweep.start()
    await timers.advance(160)
    await sweep.stop()
    expect(passes.map((at) => at - passes[0]!)).toEqual([0, 80, 160])
  })

  test('a failed pass is tried again within the backstop', async () => {
    const { sweep, passes, state, timers } = recorded({ backstopMs: 50 })
    state.fail = true
    const errors: unknown[] = []
    const original = console.error
    console.error = (...args: unknown[]) => errors.push(args)
    try {
      sweep.start()
      await timers.advance(50)
    } finally {
      console.error = original
    }
    await sweep.stop()
    expect(passes.map((at) => at - passes[0]!)).toEqual([0, 50])
    expect(errors).toHaveLength(2)
  })

  test('stop waits for the pass under way and no pass runs after it', async () => {
    const { sweep, passes, state, timers } = recorded({ backstopMs: 20 })
    let release!: () => void
    state.hold = new Promise((resolve) => (release = resolve))
    sweep.start()
    await timers.advance(0)
    expect(passes).toHaveLength(1)
    let stopped = false
    const stopping = sweep.stop().then(() => (stopped = true))
    await timers.advance(20)
    expect(stopped).toBe(false)
    release()
    await stopping
    sweep.wake()
    await timers.advance(60)
    expect(passes).toHaveLength(1)
    expect(timers.nextAt).toBeUndefined()
  })
})

describe('earliestWallMs', () => {
  test('reads each due time on its organization clock', () => {
    const offsets: Record<string, number> = { ahead: 3_600_000 }
    const clock = { wallMsAt: (orgId: string, orgMs: number) => orgMs - (offsets[orgId] ?? 0) }
    // Due later on its own clock, but that clock runs an hour ahead: it falls due first.
    const due = [
      { orgId: 'plain', dueAt: new Date(10_000_000) },
      { orgId: 'ahead', dueAt: new Date(12_000_000) },
    ]
    expect(earliestWallMs(clock, due)).toBe(12_000_000 - 3_600_000)
    expect(earliestWallMs(clock, [])).toBeUndefined()
  })
})
