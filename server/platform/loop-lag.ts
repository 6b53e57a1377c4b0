/**
 * How late this process' event loop runs: a timer due every TICK_MS records how late it fired. A
 * request that arrives while the loop is this late has already waited about that long in the
 * process before any of its code ran, which the request's own clock (`arrivalOf`) cannot see.
 */
const TICK_MS = 10
/** The lag reported is the largest seen over this window, so one late tick is not forgotten at once. */
const WINDOW_MS = 200

export class LoopLag {
  /** Each tick's lateness goes to this listener too (the load shedder). */
  constructor(private readonly onTick?: (lagMs: number) => void) {}

  private timer: ReturnType<typeof setInterval> | undefined
  private expectedAt = 0
  private windowStartedAt = 0
  private windowMaxMs = 0
  private previousWindowMaxMs = 0

  start(): void {
    if (this.timer !== undefined) return
    this.expectedAt = performance.now() + TICK_MS
    this.windowStartedAt = performance.now()
    this.timer = setInterval(() => this.tick(), TICK_MS)
    this.timer.unref()
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
  }

  /** The largest lag of the current and the previous window, in milliseconds. */
  currentMs(): number {
    return Math.max(this.windowMaxMs, this.previousWindowMaxMs, this.timer === undefined ? 0 : Math.max(0, performance.now() - this.expectedAt))
  }

  private tick(): void {
    const now = performance.now()
    const lag = Math.max(0, now - this.expectedAt)
    this.expectedAt = now + TICK_MS
    if (now - this.windowStartedAt >= WINDOW_MS) {
      this.previousWindowMaxMs = this.windowMaxMs
      this.windowMaxMs = 0
      this.windowStartedAt = now
    }
    this.windowMaxMs = Math.max(this.windowMaxMs, lag)
    this.onTick?.(lag)
  }
}
