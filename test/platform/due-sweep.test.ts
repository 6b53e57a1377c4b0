import { describe, expect, test } from 'bun:test'
import { DueSweep, earliestWallMs } from '../../server/platform/due-sweep.ts'
import { eventually } from '../support/eventually.ts'

/** A sweep over a real timer whose passes are recorded and answer what `next` says. */
function recorded(options: { backstopMs?: number; minGapMs?: number } = {}) {
  const passes: number[] = []
  const state = { next: undefined as number | undefined, fail: false, hold: undefined as Promise<void> | undefined }
  const sweep = new DueSweep({ name: 'test', backstopMs: options.backstopMs ?? 10_000, minGapMs: options.minGapMs ?? 0, wallNowMs: Date.now }, async () => {
    passes.push(Date.now())
    if (state.hold) await state.hold
    if (state.fail) throw new Error('the pass failed on purpose')
    return state.next
  })
  return { sweep, passes, state }
}

async function until(condition: () => boolean, timeoutMs = 2000): Promise<void> {
  await eventually(condition, { what: 'the sweep', timeoutMs, intervalMs: 5 })
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
    const { sweep, passes, state } = recorded()
    const started = Date.now()
    state.next = started + 150
    sweep.start()
    await until(() => passes.length === 1)
    state.next = undefined
    await until(() => passes.length === 2)
    expect(passes[1]! - started).toBeGreaterThanOrEqual(145)
    // Nothing pending and a long backstop: no further pass.
    await Bun.sleep(200)
    expect(passes.length).toBe(2)
    await sweep.stop()
  })

  test('with nothing pending it still runs once per backstop', async () => {
    const { sweep, passes } = recorded({ backstopMs: 60 })
    sweep.start()
    await until(() => passes.length >= 4)
    const gaps = passes.slice(1).map((at, index) => at - passes[index]!)
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(55)
    await sweep.stop()
  })

  test('a wake brings the next pass forward; a later wake does not push it back', async () => {
    const { sweep, passes } = recorded()
    sweep.start()
    await until(() => passes.length === 1)
    const woken = Date.now()
    sweep.wake(woken + 50)
    sweep.wake(woken + 5_000)
    await until(() => passes.length === 2)
    expect(passes[1]! - woken).toBeGreaterThanOrEqual(45)
    expect(passes[1]! - woken).toBeLessThan(1_000)
    await sweep.stop()
  })

  test('a wake for work due now during a pass runs another pass right after it, never two at once', async () => {
    const { sweep, passes, state } = recorded()
    let release!: () => void
    state.hold = new Promise((resolve) => (release = resolve))
    sweep.start()
    await until(() => passes.length === 1)
    expect(sweep.busy).toBe(true)
    sweep.wake()
    sweep.wake()
    await Bun.sleep(30)
    expect(passes.length).toBe(1)
    state.hold = undefined
    release()
    await until(() => passes.length === 2)
    await Bun.sleep(50)
    expect(passes.length).toBe(2)
    await sweep.stop()
  })

  test('work reported as already due is swept again no sooner than the minimum gap', async () => {
    const { sweep, passes, state } = recorded({ minGapMs: 80 })
    state.next = 0
    sweep.start()
    await until(() => passes.length >= 3)
    await sweep.stop()
    const gaps = passes.slice(1).map((at, index) => at - passes[index]!)
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(75)
  })

  test('a failed pass is tried again within the backstop', async () => {
    const { sweep, passes, state } = recorded({ backstopMs: 50 })
    state.fail = true
    const errors: unknown[] = []
    const original = console.error
    console.error = (...args: unknown[]) => errors.push(args)
    try {
      sweep.start()
      await until(() => passes.length >= 2)
    } finally {
      console.error = original
    }
    await sweep.stop()
    expect(errors.length).toBeGreaterThanOrEqual(1)
  })

  test('stop waits for the pass under way and no pass runs after it', async () => {
    const { sweep, passes, state } = recorded({ backstopMs: 20 })
    let release!: () => void
    state.hold = new Promise((resolve) => (release = resolve))
    sweep.start()
    await until(() => passes.length === 1)
    let stopped = false
    const stopping = sweep.stop().then(() => (stopped = true))
    await Bun.sleep(20)
    expect(stopped).toBe(false)
    release()
    await stopping
    sweep.wake()
    await Bun.sleep(60)
    expect(passes.length).toBe(1)
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
