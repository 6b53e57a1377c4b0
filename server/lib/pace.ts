/**
 * A recent rate of work done (operations per millisecond), from samples of `operations` done in
 * `serviceMs`: the ratio of the two moving averages, operations over time, not the moving average
 * of each sample's own rate.
 *
 * The difference is large where samples come unevenly. The ledger writer keeps two batches in
 * flight and its thread reads their answers between requests, so past capacity two answers often
 * arrive in one turn of the loop: the second was served in a few microseconds by the clock, the
 * first in all the turn's milliseconds. An average of rates counts the second as 10 operations a
 * millisecond (its time clamped to 0.1 ms) and the first as a fraction of one, and settles over
 * twenty times above what the pair stands for. With one operation a batch (group commit off) at
 * 10,000/s offered, the writer committed about 220 a second while its estimate let about 1,200 a
 * second in, and about a thousand a second waited out their whole budget in its queue to be
 * declined at its end. Operations over time counts each such pair as what it was: two operations
 * in one turn's time.
 */
export class Pace {
  private operations = 0
  private serviceMs = 0

  constructor(
    /** Each sample's share of the averages (0 to 1). */
    private readonly weight: number,
  ) {}

  record(operations: number, serviceMs: number): void {
    if (this.serviceMs === 0) {
      this.operations = operations
      this.serviceMs = serviceMs
      return
    }
    this.operations = this.operations * (1 - this.weight) + operations * this.weight
    this.serviceMs = this.serviceMs * (1 - this.weight) + serviceMs * this.weight
  }

  /** Operations per millisecond recently; 0 before any sample with time. */
  get perMs(): number {
    return this.serviceMs > 0 ? this.operations / this.serviceMs : 0
  }
}
