/**
 * Logging for failures that repeat at request rate (the database gone: every batch, every
 * authorization and every decline record fails the same way). Writing a stack trace to stderr per
 * request would take the event loop's time exactly when answers must stay inside their budget, so
 * each kind of failure is logged in full at most once per interval, with a count of the ones held
 * back since. The first of a burst is always written at once.
 */
const INTERVAL_MS = 1_000

interface Kind {
  lastLoggedAt: number
  suppressed: number
}

const kinds = new Map<string, Kind>()

export function logFailure(kind: string, message: string, error?: unknown): void {
  const now = performance.now()
  const entry = kinds.get(kind)
  if (entry !== undefined && now - entry.lastLoggedAt < INTERVAL_MS) {
    entry.suppressed += 1
    return
  }
  const held = entry !== undefined && entry.suppressed > 0 ? ` (${entry.suppressed} more like it in the last ${Math.round(now - entry.lastLoggedAt)} ms not shown)` : ''
  kinds.set(kind, { lastLoggedAt: now, suppressed: 0 })
  if (error === undefined) console.error(`${message}${held}`)
  else console.error(`${message}${held}`, error)
}
