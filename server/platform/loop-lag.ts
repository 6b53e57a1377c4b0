import { openSync, readSync } from 'node:fs'

/**
 * How late this process' event loop runs: a timer due every TICK_MS records how late it fired. A
 * request that arrives while the loop is this late has already waited about that long in the
 * process before any of its code ran, which the request's own clock (`arrivalOf`) cannot see.
 */
const TICK_MS = 10
/** The lag reported is the largest seen over this window, so one late tick is not forgotten at once. */
const WINDOW_MS = 200
/** Ticks kept for `lateSinceMs`: at one every `TICK_MS`, about ten seconds of them. */
const TICKS_KEPT = 1024

/**
 * The calling thread's time running or ready to run (waiting for a core), in milliseconds, from
 * Linux' `/proc/thread-self/schedstat`; undefined where it cannot be read. A thread that is late
 * while it ran or waited for a core the whole time was late from work (its own, or the machine's);
 * one that is late while it neither ran nor waited was stopped: a blocking call, or the host
 * taking the virtual machine's core away (a kernel that accounts steal time apart, as with
 * CONFIG_PARAVIRT_TIME_ACCOUNTING, does not count it as running).
 *
 * The file is opened once per thread and read again from its start (`pread`): about 1.3 µs a read
 * against 7 for opening it each time. The path is resolved when it is opened, so the descriptor
 * keeps naming the thread that opened it: each thread gets its own.
 */
export function threadBusyMs(): number | undefined {
  try {
    schedstat ??= { fd: openSync('/proc/thread-self/schedstat', 'r'), buffer: Buffer.alloc(128) }
    const length = readSync(schedstat.fd, schedstat.buffer, 0, schedstat.buffer.length, 0)
    const fields = schedstat.buffer.toString('latin1', 0, length).split(' ')
    const busyNs = Number(fields[0]) + Number(fields[1])
    return Number.isFinite(busyNs) ? busyNs / 1e6 : undefined
  } catch {
    return undefined
  }
}

/** This thread's open schedstat (module state is per thread: a Worker loads its own copy). */
let schedstat: { fd: number; buffer: Buffer } | undefined

/**
 * Each tick's lateness, and the share of the time since the previous tick that the loop's thread
 * was running or waiting for a core (undefined where that cannot be read).
 */
export type TickListener = (lagMs: number, busyShare: number | undefined) => void

export class LoopLag {
  /**
   * Each tick's lateness goes to `onTick` too (the load shedder), with how busy the thread was
   * meanwhile, read from `busyClock` (by default the thread's own schedstat; read only for a listener).
   */
  constructor(
    private readonly onTick?: TickListener,
    private readonly busyClock: () => number | undefined = threadBusyMs,
  ) {}

  private timer: ReturnType<typeof setInterval> | undefined
  private expectedAt = 0
  private windowStartedAt = 0
  private windowMaxMs = 0
  private previousWindowMaxMs = 0
  private lastTickAt = 0
  /**
   * The last `TICKS_KEPT` ticks: when each fired (`performance.now()`) and how late, a ring written
   * at `nextTick` (a slot not yet written is late by 0).
   */
  private readonly tickAt = new Float64Array(TICKS_KEPT)
  private readonly tickLagMs = new Float64Array(TICKS_KEPT)
  private nextTick = 0
  /** The busy clock at the previous tick; undefined once it could not be read (never read again). */
  private lastBusyMs: number | undefined
  private busyReadable = true

  start(): void {
    if (this.timer !== undefined) return
    this.expectedAt = performance.now() + TICK_MS
    this.windowStartedAt = performance.now()
    this.lastTickAt = performance.now()
    this.lastBusyMs = this.onTick ? this.readBusy() : undefined
    this.timer = setInterval(() => this.tick(), TICK_MS)
    this.timer.unref()
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
  }

  /**
   * How far past its due time the loop's next tick is right now, in milliseconds (0 while it is not
   * due yet, or the clock is stopped). Read inside a long turn of the loop, it is how long that
   * turn has kept the thread from everything else: the ticks' lateness only tells it once the turn
   * is over.
   */
  overdueMs(): number {
    return this.timer === undefined ? 0 : Math.max(0, performance.now() - this.expectedAt)
  }

  /**
   * The share of the time since the last tick that the thread was busy (running, or ready and
   * waiting for a core), as the ticks measure it; undefined where that cannot be read, or the clock
   * has no listener (it then keeps no busy clock). One read of the busy clock: for a turn already
   * overdue, to tell a thread at work from one that was stopped.
   */
  busyShareSinceTick(): number | undefined {
    if (this.timer === undefined || this.lastBusyMs === undefined) return undefined
    return this.busyShareSince(this.readBusy(), performance.now())
  }

  /** The share of the time from the last tick to `now` the thread was busy, given the busy clock read now. */
  private busyShareSince(busyMs: number | undefined, now: number): number | undefined {
    const sinceMs = now - this.lastTickAt
    if (busyMs === undefined || this.lastBusyMs === undefined || sinceMs <= 0) return undefined
    return Math.min(1, Math.max(0, (busyMs - this.lastBusyMs) / sinceMs))
  }

  /** The largest lag of the current and the previous window, in milliseconds. */
  currentMs(): number {
    return Math.max(this.windowMaxMs, this.previousWindowMaxMs, this.timer === undefined ? 0 : Math.max(0, performance.now() - this.expectedAt))
  }

  /**
   * How late the loop ran after `since` (`performance.now()` time), in milliseconds: of each tick
   * that fired after it, the part of its lateness that fell after `since`, and so far the next
   * tick's (`overdueMs`). A lateness that began before `since` and ended after it counts only from
   * `since`. Read from the last `TICKS_KEPT` ticks (at least ten seconds of them): a caller
   * measuring a longer span reads it more often and keeps the largest.
   */
  lateSinceMs(since: number): number {
    let largest = Math.max(0, Math.min(this.overdueMs(), performance.now() - since))
    for (let index = 0; index < TICKS_KEPT; index++) {
      const at = this.tickAt[index]!
      if (at > since) largest = Math.max(largest, Math.min(this.tickLagMs[index]!, at - since))
    }
    return largest
  }

  private tick(): void {
    const now = performance.now()
    const lag = Math.max(0, now - this.expectedAt)
    this.expectedAt = now + TICK_MS
    this.tickAt[this.nextTick] = now
    this.tickLagMs[this.nextTick] = lag
    this.nextTick = (this.nextTick + 1) % TICKS_KEPT
    if (now - this.windowStartedAt >= WINDOW_MS) {
      this.previousWindowMaxMs = this.windowMaxMs
      this.windowMaxMs = 0
      this.windowStartedAt = now
    }
    this.windowMaxMs = Math.max(this.windowMaxMs, lag)
    if (this.onTick === undefined) return
    const busyMs = this.readBusy()
    const busyShare = this.busyShareSince(busyMs, now)
    this.lastTickAt = now
    this.lastBusyMs = busyMs
    this.onTick(lag, busyShare)
  }

  private readBusy(): number | undefined {
    if (!this.busyReadable) return undefined
    const busyMs = this.busyClock()
    if (busyMs === undefined) this.busyReadable = false
    return busyMs
  }
}
