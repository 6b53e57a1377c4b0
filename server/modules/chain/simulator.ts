import { EVERY_ORGANIZATION, type OwnedOrganizations } from '../../platform/ownership.ts'
import { and, eq, isNull, min, ne } from 'drizzle-orm'
import { sha256 } from '@noble/hashes/sha2.js'
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils.js'
import type { Database } from '../../../db/client.ts'
import { chainWithdrawals } from '../../../db/schema/index.ts'
import { assert } from '../../lib/assert.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import type { Clock } from '../clock/clock.ts'
import { earliestWallMs } from '../../platform/due-sweep.ts'
import type { ChainAdapter, OutgoingTransfer, UnsignedTransaction, WithdrawalOutcome } from './adapter.ts'
import { parseAddress, type Network } from './addresses.ts'
import type { AddressDeriver } from './derivation.ts'
import { blockAt, confirmationsRequired, finalityAt, simulatedTxHash } from './networks.ts'

export type ChainWithdrawalRecord = typeof chainWithdrawals.$inferSelect

/** The token each rail moves: Tether's TRC-20 contract on Tron, Circle's USDC coin type on Sui (mainnet identifiers). */
const TOKENS: Readonly<Record<Network, string>> = {
  tron: 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t',
  sui: '0xdba34672e30cb065b1f93e3ab55318768fd6fef66c15942c9f7cb846e2f900e7::usdc::USDC',
}

/** The unsigned transfer of a withdrawal from the organization's hot wallet: the same transfer always gives the same bytes. */
export function buildUnsignedTransfer(deriver: AddressDeriver, transfer: OutgoingTransfer): UnsignedTransaction {
  assert(transfer.amountMinor > 0n, 'a withdrawal moves a positive amount')
  // Keys in a fixed order and amounts as strings: the same transfer always gives the same bytes.
  const payload = JSON.stringify({
    network: transfer.network,
    asset: transfer.asset,
    token: TOKENS[transfer.network],
    from: deriver.hotWalletAddress(transfer.orgId, transfer.network),
    to: parseAddress(transfer.network, transfer.toAddress, 'toAddress'),
    amountMinor: transfer.amountMinor.toString(),
    reference: transfer.withdrawalId,
  })
  return { network: transfer.network, encoding: 'json', payload, digest: bytesToHex(sha256(utf8ToBytes(payload))) }
}

/**
 * Production's adapter until a real chain watcher and signer is configured: withdrawals are built
 * (the unsigned transaction is readable once approved) but never reported as sent, so nothing can
 * complete with made-up chain evidence. Approved withdrawals stay `approved`, their funds in
 * flight, and are broadcast by the sweep once an adapter that can sign is plugged in.
 */
export class UnconfiguredChain implements ChainAdapter {
  constructor(private readonly deriver: AddressDeriver) {}

  buildUnsignedTransaction(transfer: OutgoingTransfer): UnsignedTransaction {
    return buildUnsignedTransfer(this.deriver, transfer)
  }

  async submitWithdrawal(transfer: OutgoingTransfer): Promise<{ txHash: string }> {
    throw new ApiError('partner_unavailable', `No chain adapter that can sign is configured; withdrawal ${transfer.withdrawalId} stays approved`)
  }

  onWithdrawalOutcome(): void {
    // Nothing is ever sent, so there are no outcomes to report.
  }
}

/** One settle pass delivers at most this many outcomes; the next pass takes the rest. */
const DELIVERY_BATCH_MAX = 200

/**
 * The sandbox chain: the one adapter shipped. Withdrawals it is asked to send are kept in Postgres
 * (`chain_withdrawals`), confirmed once the organization's clock has passed the network's
 * confirmation count, or failed if a test key asked for that before finality. Outcomes are
 * delivered to the listeners at least once and again after a restart until every listener has
 * finished with them.
 */
export class SandboxChain implements ChainAdapter {
  private readonly listeners: Array<(outcome: WithdrawalOutcome) => Promise<void>> = []
  /** Settle passes run one at a time (sweep, clock advance and tests may ask at once). */
  private settling: Promise<void> = Promise.resolve()
  /** Told the wall-clock time a withdrawal just submitted reaches finality (the settle sweep's wake). */
  private dueListener: ((wallMs: number) => void) | undefined

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly deriver: AddressDeriver,
    /** The organizations whose outcomes this server delivers (in cluster mode, those it owns: their withdrawals close on the owner). */
    private readonly ownedOrganizations: OwnedOrganizations = EVERY_ORGANIZATION,
  ) {}

  buildUnsignedTransaction(transfer: OutgoingTransfer): UnsignedTransaction {
    return buildUnsignedTransfer(this.deriver, transfer)
  }

  async submitWithdrawal(transfer: OutgoingTransfer): Promise<{ txHash: string }> {
    assert(transfer.amountMinor > 0n, 'a withdrawal moves a positive amount')
    const submittedMs = this.clock.nowMs(transfer.orgId)
    await this.db
      .insert(chainWithdrawals)
      .values({
        withdrawalId: transfer.withdrawalId,
        orgId: transfer.orgId,
        network: transfer.network,
        asset: transfer.asset,
        toAddress: parseAddress(transfer.network, transfer.toAddress, 'toAddress'),
        amount: transfer.amountMinor,
        txHash: simulatedTxHash(transfer.network, `withdrawal/${transfer.withdrawalId}`),
        block: blockAt(transfer.network, submittedMs).toString(),
        confirmationsRequired: confirmationsRequired(transfer.network),
        state: 'submitted',
        failureReason: null,
        submittedAt: new Date(submittedMs),
        finalAt: new Date(finalityAt(transfer.network, submittedMs)),
      })
      // A second submission of the same withdrawal is the same broadcast.
      .onConflictDoNothing()
    const row = await this.findWithdrawal(transfer.orgId, transfer.withdrawalId)
    assert(row !== undefined, 'a submitted withdrawal is recorded')
    this.dueListener?.(this.clock.wallMsAt(row.orgId, row.finalAt.getTime()))
    return { txHash: row.txHash }
  }

  onWithdrawalOutcome(listener: (outcome: WithdrawalOutcome) => Promise<void>): void {
    this.listeners.push(listener)
  }

  async findWithdrawal(orgId: string, withdrawalId: string): Promise<ChainWithdrawalRecord | undefined> {
    const [row] = await this.db
      .select()
      .from(chainWithdrawals)
      .where(and(eq(chainWithdrawals.withdrawalId, withdrawalId), eq(chainWithdrawals.orgId, orgId)))
    return row
  }

  /**
   * Makes a submitted withdrawal fail instead of confirming. Only before finality: a withdrawal
   * that is final (or already failed) is `conflict`; one never submitted is `not_found`.
   */
  async failWithdrawal(orgId: string, withdrawalId: string, reason: string): Promise<ChainWithdrawalRecord> {
    const row = await this.findWithdrawal(orgId, withdrawalId)
    if (!row) throw notFound('withdrawal on the sandbox chain (it is sent after approval)')
    if (row.state !== 'submitted' || row.failureReason !== null) throw new ApiError('conflict', `Withdrawal ${withdrawalId} is already ${row.failureReason !== null ? 'failing' : row.state} on chain`)
    if (this.clock.nowMs(orgId) >= row.finalAt.getTime()) throw new ApiError('conflict', `Withdrawal ${withdrawalId} reached finality at ${row.finalAt.toISOString()}`)
    const [updated] = await this.db
      .update(chainWithdrawals)
      .set({ failureReason: reason })
      .where(and(eq(chainWithdrawals.withdrawalId, withdrawalId), eq(chainWithdrawals.state, 'submitted'), isNull(chainWithdrawals.failureReason)))
      .returning()
    if (!updated) throw new ApiError('conflict', `Withdrawal ${withdrawalId} settled meanwhile`)
    // Finality is judged on the clock, not on when a sweep runs: a failure asked for in time wins.
    return updated
  }

  /** Calls `listener` with the wall-clock time each withdrawal submitted from now on reaches finality. */
  onDue(listener: (wallMs: number) => void): void {
    this.dueListener = listener
  }

  /**
   * When a settle pass next has work, in wall-clock ms: the earliest finality of a submitted
   * withdrawal on its organization's clock, or now while settled outcomes wait to be delivered to
   * a listener (a listener that failed is called again). Undefined when nothing is pending.
   */
  async nextDueWallMs(): Promise<number | undefined> {
    const due = await this.db
      .select({ orgId: chainWithdrawals.orgId, dueAt: min(chainWithdrawals.finalAt) })
      .from(chainWithdrawals)
      .where(eq(chainWithdrawals.state, 'submitted'))
      .groupBy(chainWithdrawals.orgId)
    const next = earliestWallMs(this.clock, due)
    if (this.listeners.length === 0) return next
    const [undelivered] = await this.db
      .select({ withdrawalId: chainWithdrawals.withdrawalId })
      .from(chainWithdrawals)
      .where(and(ne(chainWithdrawals.state, 'submitted'), isNull(chainWithdrawals.acknowledgedAt)))
      .limit(1)
    return undelivered === undefined ? next : this.clock.wallNowMs()
  }

  /** Settles what is due (all organizations, or one after its clock moved) and delivers outcomes. */
  settleDue(orgId?: string): Promise<void> {
    const pass = this.settling.then(() => this.settleOnce(orgId))
    this.settling = pass.catch(() => {})
    return pass
  }

  private async settleOnce(orgId: string | undefined): Promise<void> {
    const open = await this.db
      .select()
      .from(chainWithdrawals)
      .where(orgId === undefined ? eq(chainWithdrawals.state, 'submitted') : and(eq(chainWithdrawals.state, 'submitted'), eq(chainWithdrawals.orgId, orgId)))
    for (const row of open) {
      if (this.clock.nowMs(row.orgId) < row.finalAt.getTime()) continue
      await this.db
        .update(chainWithdrawals)
        .set({ state: row.failureReason === null ? 'completed' : 'failed', settledAt: row.finalAt })
        .where(and(eq(chainWithdrawals.withdrawalId, row.withdrawalId), eq(chainWithdrawals.state, 'submitted')))
    }
    await this.deliverOutcomes(orgId)
  }

  private async deliverOutcomes(orgId: string | undefined): Promise<void> {
    // Without a listener nothing is acknowledged: the outcomes wait for one (also across restarts).
    if (this.listeners.length === 0) return
    const settled = and(ne(chainWithdrawals.state, 'submitted'), isNull(chainWithdrawals.acknowledgedAt))
    const rows = await this.db
      .select()
      .from(chainWithdrawals)
      .where(and(settled, orgId === undefined ? undefined : eq(chainWithdrawals.orgId, orgId), this.ownedOrganizations(chainWithdrawals.orgId)))
      .orderBy(chainWithdrawals.finalAt)
      .limit(DELIVERY_BATCH_MAX)
    for (const row of rows) {
      const outcome = toOutcome(row)
      try {
        for (const listener of this.listeners) await listener(outcome)
      } catch (error) {
        console.error(`chain: delivering the outcome of ${row.withdrawalId} failed; it is delivered again`, error)
        continue
      }
      await this.db.update(chainWithdrawals).set({ acknowledgedAt: new Date() }).where(eq(chainWithdrawals.withdrawalId, row.withdrawalId))
    }
  }
}

export function toOutcome(row: ChainWithdrawalRecord): WithdrawalOutcome {
  assert(row.state !== 'submitted', 'only a settled withdrawal has an outcome')
  if (row.state === 'failed') return { withdrawalId: row.withdrawalId, orgId: row.orgId, status: 'failed', reason: row.failureReason ?? 'failed on chain' }
  return {
    withdrawalId: row.withdrawalId,
    orgId: row.orgId,
    status: 'completed',
    evidence: { txHash: row.txHash, network: row.network, block: row.block, confirmations: row.confirmationsRequired, confirmedAt: row.finalAt.toISOString() },
  }
}
