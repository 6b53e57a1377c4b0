/**
 * The most recent slow events of a kind, at most `capacity` of them: a ring that keeps the newest and
 * counts every one it was given, so a reader can tell how many it missed. What counts as slow is the
 * caller's (`thresholdMs`); the log only keeps what it is given, oldest first when read.
 */
export class SlowLog<Entry> {
  private readonly ring: Entry[] = []
  private next = 0
  /** Entries given since the log was made, kept or since overwritten. */
  recorded = 0

  constructor(
    readonly thresholdMs: number,
    readonly capacity: number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`a slow log keeps at least one entry, not ${capacity}`)
  }

  /** Whether something that took `durationMs` belongs in the log. */
  isSlow(durationMs: number): boolean {
    return durationMs >= this.thresholdMs
  }

  add(entry: Entry): void {
    if (this.ring.length < this.capacity) this.ring.push(entry)
    else this.ring[this.next] = entry
    this.next = (this.next + 1) % this.capacity
    this.recorded += 1
  }

  /** The kept entries, oldest first. */
  entries(): Entry[] {
    if (this.ring.length < this.capacity) return this.ring.slice()
    return [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)]
  }
}
