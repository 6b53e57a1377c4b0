/**
 * Past the server's capacity its one thread is the bottleneck: requests it has not read yet wait in
 * the kernel, outside any budget, and every answer it gives late makes the next ones later. The
 * shedder tells that standing overload from a single stall by how late the event loop's ticks fire
 * (`LoopLag`), the way CoDel tells a standing queue from a burst: one late tick (a full garbage
 * collection, a slow step) is followed by ticks on time once its backlog is read, while an
 * overloaded thread never catches up, so tick after tick is late. While that lasts, a share of the
 * authorizations is refused at once, before their body is read (429, nothing recorded: the cheapest
 * answer the thread can give), and the share falls back, step by step, to nothing once ticks are on
 * time again. A tick counts as late only if the thread was busy (running, or ready and waiting for
 * a core) for at least `busyShare` of the time since the previous tick: a thread that was stopped instead (the host took the core away, a blocking
 * call) has no standing queue of its own to shed. One stop is one late tick and never shed; stops
 * tick after tick would otherwise look like a thread past capacity. The ticks late while a stop's
 * backlog is read are busy, and count. The defaults favour the 500 ms budget over never
 * shedding at saturation; the rules compared to reach them are in docs/architecture.md ("Load
 * shedding").
 */
export interface SheddingPolicy {
  /** A tick later than this counts as late. */
  lateMs: number
  /** Consecutive late ticks that make a standing lateness (one alone is a stall). */
  lateTicks: number
  /** The share shed grows by this for each late tick of a standing lateness… */
  stepUp: number
  /** …and falls by this for each tick on time. */
  stepDown: number
  /** A late tick counts only if the thread was busy at least this share of the time since the one before. */
  busyShare: number
  /**
   * Every sheddable request read while the loop's next tick is overdue by this much or more, the
   * thread busy for at least `busyShare` of the time since the last tick, is shed, whatever the
   * share: the share changes only between turns of the loop, and one turn that admits what it reads
   * can run for seconds. A turn overdue because the thread was stopped (the host took the core
   * away) sheds nothing for it, as such a tick raises no share.
   */
  overdueMs: number
}

/**
 * A turn overdue by 100 ms sheds all it still reads: past
 * capacity the thread ran one turn of 2.2 s in one measured run (from its schedstat: running, not waiting for a
 * core), reading a backlog with the share low and admitting what it read, and the answers it owed
 * crossed 500 ms. The share, moved only by the ticks between turns, cannot see inside one.
 *
 * The share falls by 0.01 a tick on time, from all to none in a second: the `Retry-After` the
 * refusals carry. A faster fall (0.05, 200 ms) let the share drop to nothing between floods past
 * capacity, each flood read in long turns of the loop before the share rose again, and answers
 * crossed 500 ms. A late tick raises it only while the lateness is not shrinking: falling this
 * slowly, a share raised through every late tick of a backlog being read down stayed too high
 * (docs/architecture.md, "Load shedding").
 */
export const DEFAULT_SHEDDING: SheddingPolicy = { lateMs: 10, lateTicks: 2, stepUp: 0.25, stepDown: 0.01, busyShare: 0.5, overdueMs: 100 }

export class LoadShedder {
  private share = 0
  private lateRun = 0
  /** The previous tick's lateness. */
  private lastLagMs = 0
  /** Authorizations shed since start. */
  shed = 0
  /** Of them, shed because they were read in a turn of the loop overdue by `overdueMs` or more. */
  shedOverdue = 0
  /** Late ticks not counted since start because the thread was stopped, not busy. */
  stalls = 0

  constructor(
    private readonly policy: SheddingPolicy = DEFAULT_SHEDDING,
    private readonly random: () => number = Math.random,
  ) {}

  /**
   * Fed by every tick of the loop's clock with how late it fired, and the share of the time since
   * the previous tick the thread was busy (undefined where that is unknown: the tick then counts
   * by its lateness alone).
   */
  observe(lagMs: number, busyShare?: number): void {
    const previousLagMs = this.lastLagMs
    this.lastLagMs = lagMs
    if (lagMs > this.policy.lateMs) {
      if (busyShare === undefined || busyShare >= this.policy.busyShare) {
        this.lateRun += 1
        // Only while the lateness is not shrinking: a tick less late than the one before is a
        // backlog being read down, and the share in force is already enough for it.
        if (this.lateRun >= this.policy.lateTicks && lagMs >= previousLagMs) this.share = Math.min(1, this.share + this.policy.stepUp)
        return
      }
      // Late, but the thread mostly neither ran nor waited for a core: a stall, counted like a tick on time.
      this.stalls += 1
    }
    this.lateRun = 0
    this.share = Math.max(0, this.share - this.policy.stepDown)
  }

  /** The share of sheddable requests declined right now, 0 to 1. */
  get currentShare(): number {
    return this.share
  }

  /**
   * Whether a request read now might be shed, `overdueMs` being how far past its due time the
   * loop's next tick is (`LoopLag.overdueMs`): the cheap test before anything of the request is read.
   */
  mayShed(overdueMs: number): boolean {
    return this.share > 0 || overdueMs >= this.policy.overdueMs
  }

  /**
   * Whether this request is shed (counted when it is), read while the loop's next tick is
   * `overdueMs` past due; `busyShare` tells how busy the thread was since the last tick, read only
   * for a turn overdue enough to count (undefined where unknown: the turn then counts by its
   * overdue time alone).
   */
  shouldShed(overdueMs = 0, busyShare?: () => number | undefined): boolean {
    if (overdueMs >= this.policy.overdueMs && (busyShare?.() ?? 1) >= this.policy.busyShare) {
      this.shedOverdue += 1
    } else if (this.share === 0 || this.random() >= this.share) {
      return false
    }
    this.shed += 1
    return true
  }
}
