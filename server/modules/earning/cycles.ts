import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { EventRow } from '../events/write-sets.ts'
import { ApiError } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount } from '../../lib/money.ts'
import { requireAsset } from '../../lib/assets.ts'
import { appendEvent } from '../events/writer.ts'
import { formatPrice } from '../vaults/prices.ts'
import * as vaultsRepo from '../vaults/repo.ts'
import type { AlongsideWrite, VaultCatalog } from '../vaults/service.ts'
import type { VaultVenue } from '../vaults/venue.ts'
import { planDepositSettlement, planRedeemSettlement, planRollback, type CyclePlan, type IntentResult } from './plan.ts'
import * as repo from './repo.ts'
import { intentDigest } from './views.ts'

export interface CycleDeps {
  db: Database
  ledger: Ledger
  vaults: VaultCatalog
  venue: VaultVenue
  /** Test-only: the process is killed at this named point (crash tests). */
  crashPoint: string | undefined
  /**
   * Cluster mode: carries out one organization's part of a cycle's decided resolution at the
   * server that owns the organization; rejects when it was not carried out. Undefined outside a
   * cluster, where a settlement or roll back is one transaction.
   */
  parts?: CyclePartDispatch
}

export type CyclePartDispatch = (cycleId: string, orgId: string) => Promise<void>

/** At most this many organizations' parts are asked for at once. */
const PARTS_AT_ONCE = 8

/** What becomes of a closed cycle: settled at a price with the venue's digest, or rolled back. */
type Resolution = { kind: 'settle'; price: bigint; digest: string } | { kind: 'rollback'; price: null; digest: null }

function resolutionOf(cycle: vaultsRepo.CycleRecord): Resolution {
  if (cycle.resolution === 'settle') return { kind: 'settle', price: cycle.resolutionPrice!, digest: cycle.resolutionDigest! }
  return { kind: 'rollback', price: null, digest: null }
}

function outcomeOf(resolution: Resolution, plan: CyclePlan, finishedAt: Date): repo.CycleOutcome {
  if (resolution.kind === 'rollback') return { state: 'rolled_back', finishedAt, price: null, totalAmount: plan.totalAmount, totalShares: plan.totalShares, fee: 0n }
  return { state: 'settled', finishedAt, price: resolution.price, totalAmount: plan.totalAmount, totalShares: plan.totalShares, fee: plan.fee }
}

/** Runs `work` for each item, at most `width` at a time. */
async function inPool<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  const lane = async () => {
    while (next < items.length) await work(items[next++]!)
  }
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, lane))
}

export interface CycleView {
  cycleId: string
  vaultId: string
  cycleKind: 'deposit' | 'redeem'
  settlementCycle: number
  state: vaultsRepo.CycleRecord['state']
  openedAt: string
  closedAt: string | null
  finishedAt: string | null
  sharePrice: string | null
  totalAmount: string | null
  totalShares: string | null
  fee: string | null
  intents: number | null
}

export function toCycleView(row: vaultsRepo.CycleRecord, decimals: number): CycleView {
  const format = (value: bigint | null) => (value === null ? null : formatAmount(value, decimals))
  return {
    cycleId: row.id,
    vaultId: row.vaultId,
    cycleKind: row.kind,
    settlementCycle: row.number,
    state: row.state,
    openedAt: row.openedAt.toISOString(),
    closedAt: row.closedAt?.toISOString() ?? null,
    finishedAt: row.finishedAt?.toISOString() ?? null,
    sharePrice: row.price === null ? null : formatPrice(row.price),
    totalAmount: format(row.totalAmount),
    totalShares: format(row.totalShares),
    fee: format(row.fee),
    intents: row.intents,
  }
}

/** Vault cycles: close, settle and roll back, each a no-op when repeated. */
export class Cycles {
  constructor(private readonly deps: CycleDeps) {}

  async require(cycleId: string): Promise<vaultsRepo.CycleRecord> {
    const cycle = await vaultsRepo.findCycle(this.deps.db, cycleId)
    if (!cycle) throw new ApiError('not_found', `No such cycle ${cycleId}`)
    return cycle
  }

  async view(cycle: vaultsRepo.CycleRecord): Promise<CycleView> {
    const vault = await this.deps.vaults.require(cycle.vaultId)
    return toCycleView(cycle, requireAsset(vault.asset).decimals)
  }

  /** Closes an open cycle (and opens the next); a cycle already past open is answered as it is. */
  async close(cycleId: string, alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    const cycle = await this.require(cycleId)
    if (cycle.state !== 'open') return cycle
    const vault = await this.deps.vaults.require(cycle.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const now = this.deps.vaults.now()
    await this.deps.db.transaction(async (tx) => {
      const totals = await repo.closeCycle(tx, cycle, now)
      if (!totals) return
      await vaultsRepo.insertCycle(tx, vaultsRepo.newCycle(cycle.vaultId, cycle.kind, cycle.number + 1, now))
      const data: Record<string, unknown> = { vaultId: cycle.vaultId, cycleKind: cycle.kind, settlementCycle: cycle.number, cycleId: cycle.id, intents: totals.intents }
      if (cycle.kind === 'deposit') data.totalAmount = formatAmount(totals.totalAmount, decimals)
      else data.totalShares = formatAmount(totals.totalShares, decimals)
      await appendEvent(tx, { orgId: null, type: 'vault.cycle.closed', data, created: now })
      if (alongside) await alongside(tx)
    })
    return this.require(cycleId)
  }

  /**
   * Settles a cycle at one fresh price from the venue (an open one is closed first). Every intent
   * and every movement commits in one transaction with the cycle's new state, or nothing does; a
   * settled cycle is answered as it is. `alongside` (an operator's audit record) commits with the
   * settlement. In a cluster the settlement is decided once and carried out per organization
   * (`resolveInParts`).
   */
  async settle(cycleId: string, alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    const cycle = await this.close(cycleId)
    if (cycle.state === 'settled') return cycle
    if (cycle.state === 'rolled_back') throw new ApiError('conflict', `Cycle ${cycleId} was rolled back`, { field: 'cycleId' })
    return this.deps.parts ? this.resolveInParts(cycle, 'settle', alongside) : this.resolveAtOnce(cycle, 'settle', alongside)
  }

  /** Rolls back an open or closed cycle: every intent cancelled (reason rollback), everything given back exactly. */
  async rollback(cycleId: string, alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    const cycle = await this.close(cycleId)
    if (cycle.state === 'rolled_back') return cycle
    if (cycle.state === 'settled') throw new ApiError('conflict', `Cycle ${cycleId} is settled`, { field: 'cycleId' })
    return this.deps.parts ? this.resolveInParts(cycle, 'rollback', alongside) : this.resolveAtOnce(cycle, 'rollback', alongside)
  }

  /** On one server: the whole cycle in one transaction through the ledger (`commit`). */
  private async resolveAtOnce(cycle: vaultsRepo.CycleRecord, kind: Resolution['kind'], alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    const vault = await this.deps.vaults.require(cycle.vaultId)
    const now = this.deps.vaults.now()
    const intents = await repo.confirmedIntents(this.deps.db, cycle.id)
    const resolution: Resolution = kind === 'settle' ? { kind, ...(await this.priceAndDigest(cycle, vault, intents, now)) } : { kind, price: null, digest: null }
    const plan = this.plan(cycle, vault, resolution, intents, now)
    await this.commit(cycle, plan, outcomeOf(resolution, plan, now), this.cycleEvent(cycle, vault, resolution, plan, intents.length, now), alongside)
    return this.require(cycle.id)
  }

  /**
   * Cluster mode (docs/scale-out.md, "Earning in a cluster"): the resolution is decided once on
   * the cycle (for a settlement: the venue's price, recorded, and its digest), then each
   * organization with intents left has its part carried out by its owner, under that owner's
   * fence; the cycle's row moves last, with its totals and event. A part that fails leaves the
   * cycle closed with its resolution decided: the call answers 503 and a retry (or the cadence
   * worker) carries out what is left, at the same price.
   */
  private async resolveInParts(cycle: vaultsRepo.CycleRecord, kind: Resolution['kind'], alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    const vault = await this.deps.vaults.require(cycle.vaultId)
    let decided: vaultsRepo.CycleRecord | undefined = cycle
    if (cycle.resolution === null) {
      let price: bigint | null = null
      let digest: string | null = null
      if (kind === 'settle') ({ price, digest } = await this.priceAndDigest(cycle, vault, await repo.confirmedIntents(this.deps.db, cycle.id), this.deps.vaults.now()))
      decided = await vaultsRepo.decideResolution(this.deps.db, cycle.id, kind, price, digest)
    }
    if (decided === undefined) return this.require(cycle.id)
    if (decided.resolution !== kind) {
      throw new ApiError('conflict', `Cycle ${cycle.id} is being ${decided.resolution === 'settle' ? 'settled' : 'rolled back'}`, { field: 'cycleId' })
    }
    const failed: string[] = []
    await inPool(await repo.orgsWithConfirmedIntents(this.deps.db, cycle.id), PARTS_AT_ONCE, (orgId) =>
      this.deps.parts!(cycle.id, orgId).catch((error: Error) => {
        failed.push(`${orgId}: ${error.message}`)
      }),
    )
    if (failed.length > 0) {
      throw new ApiError(
        'partner_unavailable',
        `Cycle ${cycle.id}: the ${kind === 'settle' ? 'settlement' : 'roll back'} is decided and ${failed.length} organization(s) wait for their part (${failed.slice(0, 3).join('; ')}); the cycle stays closed; retry`,
        { headers: { 'retry-after': '1' } },
      )
    }
    const now = this.deps.vaults.now()
    const resolution = resolutionOf(decided)
    const moved = await repo.resolvedIntents(this.deps.db, cycle.id, kind)
    // Planned again over what the parts moved, at the recorded price: the cycle's totals.
    const plan = this.plan(decided, vault, resolution, moved, now)
    const event = this.cycleEvent(decided, vault, resolution, plan, moved.length, now)
    await this.deps.db.transaction(async (tx) => {
      if (!(await repo.markFinished(tx, cycle.id, outcomeOf(resolution, plan, now), moved.length))) return
      await appendEvent(tx, { orgId: null, type: event.type, data: event.data, created: now })
      if (alongside) await alongside(tx)
    })
    return this.require(cycle.id)
  }

  /**
   * One organization's part of a cycle's decided resolution, carried out by its owner (cluster
   * mode): its intents still confirmed, planned at the recorded price and committed through the
   * ledger with their rows. Answers how many intents moved (0 when none were left).
   */
  async carryOutPart(cycleId: string, orgId: string): Promise<number> {
    const cycle = await this.require(cycleId)
    if (cycle.state !== 'closed' || cycle.resolution === null) return 0
    const vault = await this.deps.vaults.require(cycle.vaultId)
    const now = this.deps.vaults.now()
    const intents = await repo.confirmedIntents(this.deps.db, cycleId, orgId)
    if (intents.length === 0) return 0
    // Each intent has its event, so an organization with intents always has an operation.
    const plan = this.plan(cycle, vault, resolutionOf(cycle), intents, now)
    try {
      await this.deps.ledger.submitBundle(plan.ops, [
        {
          write: async (tx) => {
            const moved = await repo.moveIntents(tx, cycleId, plan.updates, now)
            if (moved === 0) return false
            if (moved !== plan.updates.length) throw new Error(`cycle ${cycleId}, organization ${orgId}: ${moved} of ${plan.updates.length} intents moved`)
            return true
          },
          refusal: () => new ApiError('conflict', `The part of organization ${orgId} in cycle ${cycleId} was carried out already`, { field: 'cycleId' }),
        },
      ])
    } catch (error) {
      if (error instanceof ApiError && error.code === 'conflict') return 0
      throw error
    }
    return intents.length
  }

  /** The venue's price for a settlement (recorded in the vault's price history) and its digest for the cycle. */
  private async priceAndDigest(cycle: vaultsRepo.CycleRecord, vault: vaultsRepo.VaultRecord, intents: repo.IntentWithAccount[], now: Date): Promise<{ price: bigint; digest: string }> {
    const price = await this.deps.venue.price(vault.id, now)
    await this.deps.vaults.recordPrice(vault.id, price, now, 'settlement')
    const totalShares = cycle.kind === 'redeem' ? intents.reduce((sum, intent) => sum + intent.shares!, 0n) : 0n
    const totalAmount = cycle.kind === 'deposit' ? intents.reduce((sum, intent) => sum + intent.amount!, 0n) : 0n
    const { digest } = await this.deps.venue.settle({ cycleId: cycle.id, vaultId: vault.id, kind: cycle.kind, totalAmount, totalShares })
    return { price, digest }
  }

  /** What a resolution does to these intents: movements per organization, intent rows and events. */
  private plan(cycle: vaultsRepo.CycleRecord, vault: vaultsRepo.VaultRecord, resolution: Resolution, intents: repo.IntentWithAccount[], now: Date): CyclePlan {
    const format = (value: bigint) => formatAmount(value, requireAsset(vault.asset).decimals)
    const base = { vaultId: vault.id, asset: vault.asset, cycleId: cycle.id, at: now }
    const common = (intent: repo.IntentWithAccount): Record<string, unknown> => ({
      intentId: intent.id,
      accountId: intent.accountId,
      externalId: intent.externalId,
      vaultId: vault.id,
      recordId: intent.recordId,
    })
    if (resolution.kind === 'rollback') {
      const cancelled = (intent: repo.IntentWithAccount, result: IntentResult): EventRow[] => {
        const data: Record<string, unknown> = { ...common(intent), reason: 'rollback', digest: intentDigest(intent.id, 'rollback'), settlementCycle: cycle.number }
        if (cycle.kind === 'deposit') data.amount = format(result.amount)
        else data.shares = format(result.shares)
        return [orgEvent(intent.orgId, cycle.kind === 'deposit' ? 'transaction.deposit.cancelled' : 'transaction.redeem.cancelled', data, now)]
      }
      return planRollback(intents, cycle.kind, { ...base, movementKind: `vault_${cycle.kind}_rollback`, events: cancelled })
    }
    const { price, digest } = resolution
    const settled = (intent: repo.IntentWithAccount, result: IntentResult): EventRow[] => {
      const data: Record<string, unknown> = { ...common(intent), digest, settlementCycle: cycle.number, sharePrice: formatPrice(price) }
      if (cycle.kind === 'deposit') Object.assign(data, { shares: format(result.shares), amount: format(result.amount) })
      else Object.assign(data, { shares: format(result.shares), [vault.payoutMode === 'direct' ? 'amount' : 'claimable']: format(result.amount), walletTotal: format(result.walletTotal!) })
      return [orgEvent(intent.orgId, `transaction.${cycle.kind}.settled`, data, now)]
    }
    const context = { ...base, movementKind: `vault_${cycle.kind}_settlement`, events: settled }
    return cycle.kind === 'deposit' ? planDepositSettlement(intents, price, context) : planRedeemSettlement(intents, price, vault.payoutMode, context)
  }

  /** The platform-wide `vault.cycle.settled` or `vault.cycle.rolled_back` event. */
  private cycleEvent(cycle: vaultsRepo.CycleRecord, vault: vaultsRepo.VaultRecord, resolution: Resolution, plan: CyclePlan, intents: number, now: Date): EventRow {
    const format = (value: bigint) => formatAmount(value, requireAsset(vault.asset).decimals)
    const data: Record<string, unknown> = { vaultId: vault.id, cycleKind: cycle.kind, settlementCycle: cycle.number, cycleId: cycle.id }
    if (resolution.kind === 'rollback') {
      data.intents = intents
      if (cycle.kind === 'deposit') data.totalAmount = format(plan.totalAmount)
      else data.totalShares = format(plan.totalShares)
      return orgEvent(null, 'vault.cycle.rolled_back', data, now)
    }
    Object.assign(data, { sharePrice: formatPrice(resolution.price), digest: resolution.digest, intents })
    if (cycle.kind === 'deposit') Object.assign(data, { totalAmount: format(plan.totalAmount), mintedShares: format(plan.totalShares) })
    else Object.assign(data, { totalShares: format(plan.totalShares), netProceeds: format(plan.totalAmount), fee: format(plan.fee) })
    return orgEvent(null, 'vault.cycle.settled', data, now)
  }

  /**
   * One transaction through the ledger: the cycle's outcome and its intents' rows first (a guarded
   * write: refused when the cycle is no longer closed, so a second settle changes nothing), then
   * every organization's movement and every event. A cycle without intents moves no money.
   */
  private async commit(cycle: vaultsRepo.CycleRecord, plan: CyclePlan, outcome: repo.CycleOutcome, cycleEvent: EventRow, alongside?: AlongsideWrite): Promise<void> {
    if (plan.ops.length === 0) {
      await this.deps.db.transaction(async (tx) => {
        if (!(await repo.finishCycle(tx, cycle.id, outcome, plan.updates))) return
        await appendEvent(tx, { orgId: null, type: cycleEvent.type, data: cycleEvent.data, created: cycleEvent.createdAt! })
        if (alongside) await alongside(tx)
      })
      return
    }
    plan.ops[0]!.events!.push(cycleEvent)
    const crashPoint = this.deps.crashPoint
    try {
      await this.deps.ledger.submitBundle(plan.ops, [
        {
          write: async (tx) => {
            const done = await repo.finishCycle(tx, cycle.id, outcome, plan.updates)
            // Test-only: dies with the transaction open, its intents already moved in it.
            if (crashPoint === 'cycle-settlement') process.kill(process.pid, 'SIGKILL')
            if (done && alongside) await alongside(tx)
            return done
          },
          refusal: () => new ApiError('conflict', `Cycle ${cycle.id} is no longer closed`, { field: 'cycleId' }),
        },
      ])
    } catch (error) {
      // Another settle or rollback got there first: the cycle is answered as that one left it.
      if (error instanceof ApiError && error.code === 'conflict') return
      throw error
    }
  }

  /**
   * The cadence step: closes and settles every cycle whose vault has a cadence and whose open
   * cycle has run that long, settles cycles left closed (a crash between close and settle), and
   * finishes any cycle whose resolution was decided with parts left (cluster mode).
   */
  async runOnce(): Promise<number> {
    let settled = 0
    const now = this.deps.vaults.now().getTime()
    for (const vault of await this.deps.vaults.list()) {
      for (const kind of ['deposit', 'redeem'] as const) {
        const seconds = kind === 'deposit' ? vault.depositCycleSeconds : vault.redeemCycleSeconds
        if (seconds === null) continue
        const open = await vaultsRepo.openCycle(this.deps.db, vault.id, kind)
        if (!open || now - open.openedAt.getTime() < seconds * 1000) continue
        if (await this.settledInPass(open.id)) settled += 1
      }
    }
    for (const cycle of await vaultsRepo.closedCycles(this.deps.db)) {
      // A cycle whose resolution was decided (a cluster's, with parts left) is finished as decided,
      // cadence or not; an undecided one (a crash between close and settle) where a cadence runs.
      if (cycle.resolution === 'rollback') {
        await this.rollback(cycle.id).catch((error) => console.error(`cycles: the roll back of ${cycle.id} is not finished; the next pass retries`, error))
        continue
      }
      const vault = await this.deps.vaults.require(cycle.vaultId)
      if (cycle.resolution === null && (cycle.kind === 'deposit' ? vault.depositCycleSeconds : vault.redeemCycleSeconds) === null) continue
      if (await this.settledInPass(cycle.id)) settled += 1
    }
    return settled
  }

  /** One settlement of the cadence step; one that fails (an owner unavailable in a cluster) is logged and retried on the next pass, not in the way of the others. */
  private async settledInPass(cycleId: string): Promise<boolean> {
    try {
      await this.settle(cycleId)
      return true
    } catch (error) {
      if (!(error instanceof ApiError) || error.code !== 'partner_unavailable') throw error
      console.error(`cycles: ${error.message}`)
      return false
    }
  }
}

/** An event row for a ledger operation; `orgId` null for platform-wide vault.* events. */
export function orgEvent(orgId: string | null, type: string, data: Record<string, unknown>, created: Date): EventRow {
  return { id: newId('evt'), orgId, type, data, createdAt: created }
}
