/**
 * Waits for something that happens in another process or on a real timer (a server's poll, a
 * terminal's redraw): `check` runs until it stops throwing, and its value is returned; after
 * `timeoutMs` the last failure is thrown. For the rare real wait; time-driven rules use the clocks.
 */
export async function eventually<T>(check: () => T | Promise<T>, { timeoutMs = 10_000, intervalMs = 25 } = {}): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try {
      return await check()
    } catch (error) {
      if (Date.now() >= deadline) throw error
    }
    await Bun.sleep(intervalMs)
  }
}
