/**
 * Tells a standing queue from a burst, the way CoDel does (Nichols and Jacobson, "Controlling Queue
 * Delay", 2012): a queue whose wait stayed above `targetMs` for a whole `intervalMs` (every reading
 * from the first above the target to one at least an interval later was above it) is standing,
 * which is what running past capacity looks like. A burst, or a queue a closed loop keeps at some
 * steady depth under the target, dips under the target within an interval and is not.
 *
 * A caller that answers a standing queue by admitting only up to the target holds the wait at about
 * the target, so readings then hover around it; the queue counts as standing until a reading falls
 * to half the target (it has drained: the load is back under capacity), not at the first reading
 * that dips under it.
 *
 * Fed with the wait observed at each decision; costs a comparison or two per reading, no timer.
 */
export class StandingQueue {
  /** Since when every reading has been above the target (`NaN`: the last one was not). */
  private aboveSince = Number.NaN
  private standing = false

  constructor(
    readonly targetMs: number,
    readonly intervalMs: number,
  ) {}

  /** Takes the queue's wait now (`waitMs`, at `now` in ms) and answers whether the queue is standing. */
  observe(waitMs: number, now: number): boolean {
    if (waitMs > this.targetMs) {
      if (Number.isNaN(this.aboveSince)) this.aboveSince = now
      else if (now - this.aboveSince >= this.intervalMs) this.standing = true
    } else {
      this.aboveSince = Number.NaN
      if (waitMs <= this.targetMs / 2) this.standing = false
    }
    return this.standing
  }
}
