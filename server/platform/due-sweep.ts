/**
 * Background work that runs when it becomes due instead of on a fixed poll.
 *
 * A pass does what is due and answers when the next known work falls due (wall-clock ms, or
 * undefined when none is pending). The next pass runs then, or after `backstopMs` at the latest:
 * the backstop covers what this process cannot see coming (rows written by another instance, a
 * wall clock that jumps). Writes of this process that create due work call `wake` with its time,
 * so that work is never left waiting for the backstop. A failed pass is tried again after
 * `backstopMs`. At most one pass runs at a time; a wake during a pass runs another after it. A pass
 * that reports work already due (a batch left more, or a row it could not move) is followed by the
 * next one no sooner than `minGapMs`, the old poll's interval, so a row that keeps failing cannot
 * spin the loop.
 *
 * An idle pass runs once per backstop and asks Postgres one or two questions. With the sweeps
 * polling every 250 ms an idle server used 36 to 43 ms of CPU a second (docs/architecture.md, "Background work").
 */
import { PROCESS_CLOCK, type MonotonicClock } from '../lib/monotonic-clock.ts'

export interface DueSweepOptions {
  name: string
  /** The latest a pass waits for, whatever the last one said. */
  backstopMs: number
  /** The least time between the end of a pass and the start of the next one it asked for. */
  minGapMs: number
  /** The wall clock the due times are read against (the runtime clock's, which tests can pin). */
  wallNowMs: () => number
  /**
   * The timer the next pass waits on: the process's, unref'd (the default), or one a test moves by
   * hand. Only its timers are used: due times are read on `wallNowMs`.
   */
  timers?: SweepTimers
}

export type SweepTimers = Pick<MonotonicClock, 'set' | 'clear'>

export class DueSweep {
  private timer: unknown
  /** Wall-clock ms the timer is set for (Infinity: none). */
  private timerAt = Infinity
  private running: Promise<void> | undefined
  /** A wake for work due now arrived during a pass: run again when it ends. */
  private again = false
  /** Wakes before `start` are dropped: work created before the sweep runs is found by its first pass. */
  private started = false
  private stopped = false

  private readonly timers: SweepTimers

  constructor(
    private readonly options: DueSweepOptions,
    private readonly pass: () => Promise<number | undefined>,
  ) {
    this.timers = options.timers ?? PROCESS_CLOCK
  }

  start(): void {
    this.started = true
    this.wake()
  }

  /** Work falls due at `atMs` (wall clock; default now): a pass runs by then. */
  wake(atMs?: number): void {
    if (!this.started || this.stopped) return
    const now = this.options.wallNowMs()
    const at = atMs === undefined ? now : atMs
    if (this.running !== undefined && at <= now) {
      this.again = true
      return
    }
    this.schedule(at, now)
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer !== undefined) this.timers.clear(this.timer)
    this.timer = undefined
    await this.running
  }

  /**
   * One pass now, as its timer would run it, answered once it has ended (after any pass already
   * running). Tests drive a sweep with it instead of waiting for its timer; the timer is set again
   * from what the pass answered, as after any pass.
   */
  async runOnce(): Promise<void> {
    while (this.running !== undefined) await this.running
    if (this.timer !== undefined) this.timers.clear(this.timer)
    this.timer = undefined
    this.fire()
    await this.running
  }

  /** Whether a pass is running (tests). */
  get busy(): boolean {
    return this.running !== undefined
  }

  private schedule(atMs: number, now: number): void {
    if (this.stopped) return
    const at = Math.min(atMs, now + this.options.backstopMs)
    if (this.timer !== undefined && this.timerAt <= at) return
    if (this.timer !== undefined) this.timers.clear(this.timer)
    this.timerAt = at
    this.timer = this.timers.set(() => this.fire(), Math.max(0, at - now))
  }

  private fire(): void {
    this.timer = undefined
    this.timerAt = Infinity
    if (this.stopped) return
    if (this.running !== undefined) {
      this.again = true
      return
    }
    let next: number | undefined
    this.running = this.pass()
      .then(
        (due) => {
          next = due
        },
        (error: unknown) => {
          console.error(`${this.options.name}: sweep failed; it runs again within ${this.options.backstopMs} ms`, error)
        },
      )
      .finally(() => {
        this.running = undefined
        const now = this.options.wallNowMs()
        if (this.again) {
          this.again = false
          this.schedule(now, now)
        } else {
          this.schedule(next === undefined ? Infinity : Math.max(next, now + this.options.minGapMs), now)
        }
      })
  }
}

/**
 * The earliest wall-clock instant at which one of the organizations' clocks reaches its due time
 * (rows as a per-organization `min()` answers them; one without a due time is skipped).
 */
export function earliestWallMs(clock: { wallMsAt(orgId: string, orgMs: number): number }, due: ReadonlyArray<{ orgId: string; dueAt: Date | null }>): number | undefined {
  let earliest: number | undefined
  for (const row of due) {
    if (row.dueAt === null) continue
    const at = clock.wallMsAt(row.orgId, row.dueAt.getTime())
    if (earliest === undefined || at < earliest) earliest = at
  }
  return earliest
}

/**
 * A pass that works only when something is due: asks when the next work falls due, runs `work`
 * if that is now, and answers when the next falls due after it (the pass `DueSweep` expects).
 */
export async function whenDue(wallNowMs: () => number, nextDue: () => Promise<number | undefined>, work: () => Promise<unknown>): Promise<number | undefined> {
  const next = await nextDue()
  if (next === undefined || next > wallNowMs()) return next
  await work()
  return nextDue()
}
