import { Pace } from '../lib/pace.ts'

/** After a failed batch, how long callers with a deadline are told at once that they cannot make it. */
export const FAIL_FAST_MS = 250
/** A batch answered later than this is treated as stuck (healthy batches here take a few milliseconds, under load tens). */
const STALLED_BATCH_MS = 150
const STALLED_BATCH_FACTOR = 20
/** A batch is pipelined only behind one out for at most this many times the recent batch latency, or this floor (see `worthPipelining`). */
const PIPELINE_BEHIND_FACTOR = 2
const PIPELINE_BEHIND_MIN_MS = 5
/** Each committed batch's share of the recent batch latency and pace. */
const PACE_WEIGHT = 0.2

/**
 * The writer's recent pace and the marks it sets: batch latency and operations per millisecond
 * (moving averages), when the last batch failed, and from them how long an operation would wait,
 * when a batch in flight is overdue and when it counts as stuck.
 */
export class WriterPace {
  /** Recent batch latency (moving average), 0 before the first commit. */
  batchMs = 0
  private readonly pace = new Pace(PACE_WEIGHT)
  private lastAnsweredAt = 0
  /** When the last batch failed, if none has committed since (on the writer's clock), else 0. */
  private failedAt = 0

  /** A batch sent at `sentAt` committed `operations` at `now`. */
  committed(operations: number, sentAt: number, now: number): void {
    const latencyMs = now - sentAt
    this.batchMs = this.batchMs === 0 ? latencyMs : this.batchMs * (1 - PACE_WEIGHT) + latencyMs * PACE_WEIGHT
    // Its service time: from when it was sent or the batch before it was answered, whichever is later.
    this.pace.record(operations, now - Math.max(sentAt, this.lastAnsweredAt))
    this.lastAnsweredAt = now
    this.failedAt = 0
  }

  /** A batch failed, or memory could not be read back after one, at `now`. */
  failed(now: number): void {
    this.failedAt = now
  }

  /** Within FAIL_FAST_MS of a failure no batch has committed since. */
  failingNow(now: number): boolean {
    return this.failedAt !== 0 && now - this.failedAt < FAIL_FAST_MS
  }

  /**
   * How long an operation queued behind `waiting` others would wait for its commit: what is queued
   * ahead of it divided by the recent rate, plus one batch. Idle (`idle`), an operation is sent at
   * once: the pace of past batches says nothing about it (and an estimate left high by a slow batch
   * must not keep refusing work that would show it is stale).
   */
  expectedWaitMs(waiting: number, idle: boolean): number {
    const operationsPerMs = this.pace.perMs
    if (operationsPerMs === 0 || idle) return 0
    return waiting / operationsPerMs + this.batchMs
  }

  /** How long a batch may be in flight before nothing more is pipelined behind it: a few times what batches take here. */
  overdueAfterMs(): number {
    return Math.max(PIPELINE_BEHIND_MIN_MS, PIPELINE_BEHIND_FACTOR * this.batchMs)
  }

  /**
   * How long a batch may be in flight before it counts as stuck: far longer than batches take here,
   * the floor, or many times the recent batch latency on a slow machine.
   */
  stalledAfterMs(): number {
    return Math.max(STALLED_BATCH_MS, STALLED_BATCH_FACTOR * this.batchMs)
  }
}
