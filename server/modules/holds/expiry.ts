import type { Ledger, PendingHold } from '../../ledger/ledger.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import { logFailure } from '../../lib/log.ts'
import type { Clock } from '../clock/clock.ts'
import { closingOperation } from './service.ts'

/** How often the expiry sweep looks for holds past their expiry on their organization's clock. */
const EXPIRY_SWEEP_INTERVAL_MS = 250
/** One sweep closes at most this many holds; the next sweep takes the rest. */
const EXPIRY_SWEEP_BATCH_MAX = 1000

/**
 * A module that owns holds (payments) adds its own rows and events to the commit that expires one,
 * so the owner's state changes in the same transaction as the hold's. The sweep first hands it the
 * owned holds about to expire, so it can read what it needs for all of them at once (the owners'
 * rows, which memory does not keep); it answers how to extend each hold's commit. `false` leaves
 * that hold pending for a later sweep (its owner is not durable yet).
 */
export type HoldExpiryExtension = (holds: PendingHold[]) => Promise<ExpiryExtender>
export type ExpiryExtender = (hold: PendingHold, operation: LedgerOperation, now: Date) => boolean

/**
 * The expiry sweep: every pending hold whose organization's clock has reached its expiry is
 * released with state `expired`. `runOnce()` is one pass (tests drive it); `start` runs it every
 * 250 ms in the background until `stop`.
 */
export class HoldExpiry {
  private readonly extensions: HoldExpiryExtension[] = []
  private timer: ReturnType<typeof setInterval> | undefined
  private sweeping: Promise<unknown> | undefined

  constructor(private readonly deps: { ledger: Ledger; clock: Clock }) {}

  /** An owner of holds joins the sweep (before it starts): its rows commit with its holds' expiry. */
  extend(extension: HoldExpiryExtension): void {
    this.extensions.push(extension)
  }

  /**
   * Expires every pending hold whose organization's clock has reached its expiry, at most a
   * batch; answers how many. The owners of the owned ones read their rows first; holds taken
   * meanwhile (captured, voided, closing) are left to whoever took them.
   */
  async runOnce(): Promise<number> {
    const { ledger, clock } = this.deps
    const due = ledger.holds.due((orgId) => clock.nowMs(orgId), EXPIRY_SWEEP_BATCH_MAX)
    const owned = due.filter((hold) => hold.ownerId !== undefined)
    let extenders: ExpiryExtender[] = []
    if (owned.length > 0) {
      try {
        extenders = await Promise.all(this.extensions.map((prepare) => prepare(owned)))
      } catch (error) {
        logFailure('holds.expiry', 'hold expiry could not read the owners of the holds due; the next sweep retries', error)
        return 0
      }
    }
    const still = due.filter((hold) => ledger.holds.isPending(hold) && !hold.closing)
    const outcomes = await Promise.allSettled(still.map((hold) => this.expire(hold, extenders)))
    for (const outcome of outcomes) if (outcome.status === 'rejected') console.error('hold expiry failed; the next sweep retries', outcome.reason)
    return outcomes.filter((outcome) => outcome.status === 'fulfilled' && outcome.value).length
  }

  /** Expires one due hold, its owner's rows joining the commit; false when an owner asks it to wait. */
  private async expire(hold: PendingHold, extenders: readonly ExpiryExtender[]): Promise<boolean> {
    const { operation, now } = closingOperation(this.deps, hold, 'expired')
    if (hold.ownerId !== undefined && !extenders.every((extend) => extend(hold, operation, now))) return false
    await this.deps.ledger.submit(operation)
    return true
  }

  /** Runs the sweep in the background; a pass still running when the next is due is not doubled. */
  start(): void {
    this.timer = setInterval(() => {
      if (this.sweeping) return
      this.sweeping = this.runOnce().finally(() => {
        this.sweeping = undefined
      })
    }, EXPIRY_SWEEP_INTERVAL_MS)
    this.timer.unref()
  }

  /** Ends the background sweep, waits for a pass in progress and for the expiries it queued to commit. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
    await this.sweeping
    await this.deps.ledger.drain()
  }
}
