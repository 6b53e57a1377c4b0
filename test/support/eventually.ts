/**
 * The one helper for a real wait in tests: asks `probe` again and again until it answers something
 * `accept` takes (by default: anything but undefined, null or false), and answers that. Past
 * `timeoutMs` it throws, saying what was awaited and the last answer seen, so a failing wait names
 * its reason.
 *
 * Use it only where something outside the test's control must happen (another process, a socket, a
 * worker's timer). Time rules are driven with the organization's sandbox clock or an injected clock,
 * and background workers with their `runOnce()` step, which need no waiting at all.
 */
export interface EventuallyOptions<T> {
  /** What is awaited, for the error message. */
  what?: string
  timeoutMs?: number
  /** How long to wait between probes. */
  intervalMs?: number
  accept?: (value: T) => boolean
}

const accepted = (value: unknown) => value !== undefined && value !== null && value !== false

export async function eventually<T>(probe: () => T | Promise<T>, options: EventuallyOptions<T> = {}): Promise<T> {
  const { what = 'a condition', timeoutMs = 15_000, intervalMs = 10, accept = accepted } = options
  const deadline = performance.now() + timeoutMs
  let last: T | undefined
  for (;;) {
    last = await probe()
    if (accept(last)) return last
    if (performance.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms; last seen: ${describe(last)}`)
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}

/**
 * `eventually` for an assertion: runs `check` until it stops throwing and answers its value (which
 * may be undefined); past `timeoutMs` the last failure is thrown, so the test names what it saw.
 */
export async function eventuallyPasses<T>(check: () => T | Promise<T>, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const { timeoutMs = 10_000, intervalMs = 25 } = options
  const deadline = performance.now() + timeoutMs
  for (;;) {
    try {
      return await check()
    } catch (error) {
      if (performance.now() >= deadline) throw error
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}

/** Waits until nothing more can happen in this process's queues: pending microtasks and one timer turn. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

function describe(value: unknown): string {
  try {
    const text = JSON.stringify(value, (_key, entry) => (typeof entry === 'bigint' ? entry.toString() : entry))
    return text === undefined ? String(value) : text.slice(0, 500)
  } catch {
    return String(value)
  }
}
