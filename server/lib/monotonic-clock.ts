/**
 * A monotonic clock in milliseconds and the timers that run on it: the process's
 * (`performance.now()` and `setTimeout`), or one a test moves by hand
 * (`test/support/manual-timers.ts`) where a part's own timing is under test (the ledger's writer, a
 * sweep, the rate limiter's fail-open, the decline recorder).
 */
export interface MonotonicClock {
  now(): number
  set(run: () => void, delayMs: number): unknown
  clear(handle: unknown): void
}

function processClock(keepAlive: boolean): MonotonicClock {
  return {
    now: () => performance.now(),
    set(run, delayMs) {
      const timer = setTimeout(run, delayMs)
      if (!keepAlive) timer.unref?.()
      return timer
    },
    clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
  }
}

/** The process's clock, its timers unref'd: a watch or a background pass never keeps a process alive. */
export const PROCESS_CLOCK = processClock(false)

/** The process's clock, its timers keeping the process alive: for waits something awaits (a stop, a request). */
export const PROCESS_CLOCK_KEEPING_ALIVE = processClock(true)

/**
 * What `promise` resolves to if it does within `ms` on `clock`, else undefined (the timer is cleared
 * either way); without a promise, waits out `ms`.
 */
export async function within<T>(clock: MonotonicClock, ms: number, promise?: Promise<T>): Promise<T | undefined> {
  let timer: unknown
  const elapsed = new Promise<undefined>((resolve) => (timer = clock.set(() => resolve(undefined), ms)))
  try {
    return await (promise === undefined ? elapsed : Promise.race([promise, elapsed]))
  } finally {
    clock.clear(timer)
  }
}
