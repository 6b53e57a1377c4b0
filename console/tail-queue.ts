/** One event of the tail as the terminal shows it, with its id (the stream's cursor). */
export interface TailLine {
  id: string
  line: string
}

/**
 * What the event tail holds between the stream and the terminal, with a fixed bound, and where it
 * resumes.
 *
 * Lines wait here from their arrival until the view takes them in batches of `batchMax` at most.
 * The view takes a batch only after it wrote the previous one (through `<Static>`, which keeps
 * nothing it wrote), so at any moment the tail holds the lines waiting plus at most one batch. The stream stops reading while
 * `isFull()` and the server then holds its place, so the lines waiting never pass `waitingMax` plus
 * what one read from the network delivered. However long the tail runs, that is all it keeps: no
 * list of what was shown and no set of seen ids.
 *
 * The cursor is the id of the last line handed to the view, not of the last one received: when
 * the stream stops (pause, leaving the tab), what waited unshown is dropped and comes again from the
 * server after the cursor, so each event is shown once without a memory of the ids shown.
 */
export class TailQueue {
  private waiting: TailLine[] = []
  /** The batch handed to the view and not yet written, if any. */
  private handed: { generation: number; lastId: string } | undefined
  private generation = 0
  private filter: string
  private shownId: string | undefined

  constructor(
    readonly waitingMax: number,
    /** Lines in one batch at most: the terminal's work for one frame, and what it allocates, has a bound too. */
    readonly batchMax: number,
    start: { filter: string; cursor: string | undefined },
  ) {
    if (!Number.isInteger(waitingMax) || waitingMax < 1) throw new Error(`waitingMax must be a positive integer, got ${waitingMax}`)
    if (!Number.isInteger(batchMax) || batchMax < 1) throw new Error(`batchMax must be a positive integer, got ${batchMax}`)
    this.filter = start.filter
    this.shownId = start.cursor
  }

  /** The id of the last event written to the terminal: where a stream of the same filter resumes. */
  get cursor(): string | undefined {
    return this.shownId
  }

  /** Lines that arrived and wait for the view. */
  get size(): number {
    return this.waiting.length
  }

  /**
   * A stream starts (again) for `filter` (its types and organization as one string): answers the
   * cursor it resumes from. A different filter is a new tail, which starts at the end of the log.
   */
  follow(filter: string): string | undefined {
    this.waiting = []
    if (filter !== this.filter) {
      this.filter = filter
      this.shownId = undefined
      // A batch of the old filter still on its way to the terminal must not move the new cursor.
      this.handed = undefined
    }
    // A batch on its way to the terminal will be written: the stream resumes after it, or its
    // lines would come again and be shown twice.
    return this.handed?.lastId ?? this.shownId
  }

  /** The stream stopped: what waited unshown is dropped, to come again after the cursor. */
  stopped(): void {
    this.waiting = []
  }

  push(lines: readonly TailLine[]): void {
    for (const line of lines) this.waiting.push(line)
  }

  /** True while the stream should stop reading: the view is behind by `waitingMax` lines or more. */
  isFull(): boolean {
    return this.waiting.length >= this.waitingMax
  }

  /**
   * Takes the oldest waiting lines (`batchMax` at most) as the next batch for the view, or nothing
   * while the view has not written the last batch yet (batches handed over faster than frames
   * would pile up in the view).
   */
  take(): { generation: number; lines: string[] } | undefined {
    if (this.handed !== undefined || this.waiting.length === 0) return undefined
    const taken = this.waiting.length <= this.batchMax ? this.waiting : this.waiting.slice(0, this.batchMax)
    this.waiting = taken === this.waiting ? [] : this.waiting.slice(this.batchMax)
    this.generation += 1
    this.handed = { generation: this.generation, lastId: taken[taken.length - 1]!.id }
    return { generation: this.generation, lines: taken.map((entry) => entry.line) }
  }

  /** The view wrote the batch of `generation`: the cursor moves past it and the next may be taken. */
  written(generation: number): void {
    if (this.handed?.generation !== generation) return
    this.shownId = this.handed.lastId
    this.handed = undefined
  }
}
