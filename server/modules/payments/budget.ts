import type { Deadline, Deadlines } from '../../lib/deadlines.ts'

/**
 * An authorization's budget: the time it has left, raced by every step it waits for. The
 * deadlines are the payments module's own (`PaymentsCore.deadlines`): they fire from the request
 * path too (the front fires the due ones for every authorization it reads), not only from a
 * timer: past capacity a turn of Bun's event loop can read requests for seconds without running a
 * timer, and a budget ended by its timer alone was answered that late (see `Deadlines`).
 */

export type BudgetOutcome<T> = { kind: 'done'; value: T } | { kind: 'failed'; error: unknown } | { kind: 'timeout' }

const TIMED_OUT = { kind: 'timeout' } as const
export const done = <T>(value: T) => ({ kind: 'done' as const, value })
const failed = (error: unknown) => ({ kind: 'failed' as const, error })

/**
 * An authorization's remaining time. Every step it waits for (the account lookup, the commit, a
 * decline's record) races the same deadline, armed once per request and cancelled by `end`,
 * instead of a timer and a promise per step.
 */
export class Budget {
  private expiry: Promise<typeof TIMED_OUT> | undefined
  private armed: Deadline | undefined
  private expired = false

  constructor(
    /** The payments module's deadlines, which its front also fires from the request path. */
    private readonly deadlines: Deadlines,
    readonly deadline: number,
  ) {}

  /** Resolves to what the promise gave, or to `timeout` if the budget's remaining time runs out first. */
  race<T>(promise: Promise<T>): Promise<BudgetOutcome<T>> {
    const remainingMs = this.deadline - performance.now()
    // A step that starts with no time left still gets one turn of the event loop to finish, as the
    // budget always gave it: it races a deadline of its own, due at once.
    if (remainingMs <= 0 || this.expired) return raceDeadline(this.deadlines, promise, Math.max(0, remainingMs))
    this.expiry ??= new Promise((resolve) => {
      this.armed = this.deadlines.arm(this.deadline, () => {
        this.expired = true
        resolve(TIMED_OUT)
      })
    })
    return Promise.race([promise.then(done, failed), this.expiry])
  }

  /** As `race`, giving the step at most `maxMs` of the time left. */
  raceFor<T>(promise: Promise<T>, maxMs: number): Promise<BudgetOutcome<T>> {
    return maxMs < this.deadline - performance.now() ? raceDeadline(this.deadlines, promise, maxMs) : this.race(promise)
  }

  /** Whether no time is left: a step raced now gets only one more turn of the event loop. */
  spent(): boolean {
    return this.expired || this.deadline <= performance.now()
  }

  end(): void {
    if (this.armed !== undefined) this.deadlines.cancel(this.armed)
  }
}

/** `promise` raced against a deadline `delayMs` from now. */
async function raceDeadline<T>(deadlines: Deadlines, promise: Promise<T>, delayMs: number): Promise<BudgetOutcome<T>> {
  let armed: Deadline | undefined
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    armed = deadlines.arm(performance.now() + delayMs, () => resolve(TIMED_OUT))
  })
  try {
    return await Promise.race([promise.then(done, failed), timeout])
  } finally {
    deadlines.cancel(armed!)
  }
}
