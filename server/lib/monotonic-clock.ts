/**
 * A monotonic clock in milliseconds and the timers that run on it. `PROCESS_CLOCK` is the process's
 * (`performance.now()`, and `setTimeout` unref'd so a pending timer never keeps a process alive); a
 * test whose subject's own timing is under test (the ledger's writer, a sweep) gives one it moves
 * by hand instead (`test/support/manual-timers.ts`).
 */
export interface MonotonicClock {
  now(): number
  set(run: () => void, delayMs: number): unknown
  clear(handle: unknown): void
}

export const PROCESS_CLOCK: MonotonicClock = {
  now: () => performance.now(),
  set(run, delayMs) {
    const timer = setTimeout(run, delayMs)
    timer.unref?.()
    return timer
  },
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
}
