import type { MonotonicClock } from '../../server/lib/monotonic-clock.ts'
import { nextTurn } from './eventually.ts'

/**
 * A clock and timers that move only when a test says: `advance(ms)` runs, in order, each timer that
 * falls due meanwhile, and lets what it started settle (one turn of the event loop, no real wait)
 * before the next. For parts whose own timing is under test: a `DueSweep`'s scheduling, the ledger
 * writer's marks (`RuntimeOptions.writerClock`).
 */
export class ManualTimers implements MonotonicClock {
  private clock = 1_000_000
  private pending: Array<{ at: number; id: number; run: () => void }> = []
  private ids = 0

  readonly now = (): number => this.clock

  set(run: () => void, delayMs: number): unknown {
    const id = ++this.ids
    this.pending.push({ at: this.clock + Math.max(0, delayMs), id, run })
    return id
  }

  clear(handle: unknown): void {
    this.pending = this.pending.filter((timer) => timer.id !== handle)
  }

  /** When the earliest timer falls due, or undefined when none is set. */
  get nextAt(): number | undefined {
    return this.pending.reduce<number | undefined>((earliest, timer) => (earliest === undefined || timer.at < earliest ? timer.at : earliest), undefined)
  }

  async advance(ms: number): Promise<void> {
    const end = this.clock + ms
    await nextTurn()
    for (;;) {
      this.pending.sort((left, right) => left.at - right.at || left.id - right.id)
      const due = this.pending[0]
      if (due === undefined || due.at > end) break
      this.pending.shift()
      this.clock = due.at
      due.run()
      await nextTurn()
    }
    this.clock = end
    await nextTurn()
  }
}
