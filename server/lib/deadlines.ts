import { heapPop, heapPush } from './min-heap.ts'

/**
 * Deadlines that fire from their timer or from the request path, whichever comes first.
 *
 * Bun runs timers between turns of its event loop, and a turn goes on for as long as sockets have
 * something to read: past capacity, with requests arriving faster than they are answered, one turn
 * can read requests for seconds while no timer fires. Measured: a bare
 * `Bun.serve` spending 100 µs per request at 15,000/s offered handled 51,164 requests between two
 * ticks of a 10 ms interval, 6.7 s apart. A budget that ends by a timer alone ends that late. Code
 * that runs for every request (the authorization's front) calls `fireDue`, so a deadline inside a
 * long turn fires at the first request read after it; the timer covers an idle loop.
 *
 * One timer is armed, for the earliest deadline; the deadlines themselves are kept in a binary
 * min-heap; one cancelled lets go of its callback, and leaves the heap when its time comes or,
 * when the timer fires, as soon as nothing live is ahead of it. `fireDue` with nothing due costs a
 * comparison.
 */
export interface Deadline {
  readonly at: number
}

interface Entry extends Deadline {
  /** What it calls when due; `NOTHING` once it has fired or was cancelled. */
  fire: () => void
}

const NOTHING = () => {}
const earlier = (a: Deadline, b: Deadline) => a.at < b.at

export class Deadlines {
  private readonly heap: Entry[] = []
  private timer: ReturnType<typeof setTimeout> | undefined
  /** When the armed timer is due (`Infinity` when none is). */
  private timerAt = Number.POSITIVE_INFINITY

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Calls `fire` once, at `at` (`performance.now()` time) or at the first `fireDue` after it; `cancel` prevents it. */
  arm(at: number, fire: () => void): Deadline {
    const entry: Entry = { at, fire }
    heapPush(this.heap, entry, earlier)
    if (at < this.timerAt) this.armTimer(at)
    return entry
  }

  /** The deadline will not fire (nothing happens if it has already). What it would have called is let go at once. */
  cancel(deadline: Deadline): void {
    ;(deadline as Entry).fire = NOTHING
  }

  /** Fires every deadline that is due, and lets go of the cancelled ones ahead of the earliest live one. */
  fireDue(now = this.now()): void {
    const heap = this.heap
    // Nothing due, and the timer armed for the earliest (a timer may fire a little before its time).
    if (heap.length === 0 || (heap[0]!.at > now && heap[0]!.at >= this.timerAt)) return
    // Cancelled ones at the head leave whatever their time, so the timer is re-armed for a deadline
    // that can still fire, not for each cancelled one in turn: most budgets are cancelled a
    // millisecond after they are armed (the authorization was answered), and a timer re-armed for
    // the next of them woke the loop about once per authorization at a steady 1000/s.
    while (heap.length > 0 && (heap[0]!.at <= now || heap[0]!.fire === NOTHING)) {
      const entry = heapPop(heap, earlier)!
      const fire = entry.fire
      entry.fire = NOTHING
      fire()
    }
    if (heap.length > 0 && heap[0]!.at < this.timerAt) this.armTimer(heap[0]!.at)
  }

  /** Deadlines held, cancelled ones not yet due included. */
  get size(): number {
    return this.heap.length
  }

  private armTimer(at: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer)
    this.timerAt = at
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.timerAt = Number.POSITIVE_INFINITY
      this.fireDue()
    }, Math.max(0, Math.ceil(at - this.now())))
  }
}
