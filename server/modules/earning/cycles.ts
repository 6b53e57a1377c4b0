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
   * settlement.
   */
  async settle(cycleId: string, alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    let cycle = await this.close(cycleId)
    if (cycle.state === 'settled') return cycle
    if (cycle.state === 'rolled_back') throw new ApiError('conflict', `Cycle ${cycleId} was rolled back`, { field: 'cycleId' })
    const vault = await this.deps.vaults.require(cycle.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const now = this.deps.vaults.now()
    const price = await this.deps.venue.price(vault.id, now)
    await this.deps.vaults.recordPrice(vault.id, price, now, 'settlement')
    const intents = await repo.confirmedIntents(this.deps.db, cycle.id)
    const totalShares = cycle.kind === 'redeem' ? intents.reduce((sum, intent) => sum + intent.shares!, 0n) : 0n
    const totalAmount = cycle.kind === 'deposit' ? intents.reduce((sum, intent) => sum + intent.amount!, 0n) : 0n
    const { digest } = await this.deps.venue.settle({ cycleId: cycle.id, vaultId: vault.id, kind: cycle.kind, totalAmount, totalShares })
    const format = (value: bigint) => formatAmount(value, decimals)
    const base = { vaultId: vault.id, asset: vault.asset, cycleId: cycle.id, at: now, movementKind: `vault_${cycle.kind}_settlement` }
    const settled = (intent: repo.IntentWithAccount, result: IntentResult): EventRow[] => {
      const data: Record<string, unknown> = {
        intentId: intent.id,
        accountId: intent.accountId,
        externalId: intent.externalId,
        vaultId: vault.id,
        recordId: intent.recordId,
        digest,
        settlementCycle: cycle.number,
        sharePrice: formatPrice(price),
      }
      if (cycle.kind === 'deposit') Object.assign(data, { shares: format(result.shares), amount: format(result.amount) })
      else Object.assign(data, { shares: format(result.shares), [vault.payoutMode === 'direct' ? 'amount' : 'claimable']: format(result.amount), walletTotal: format(result.walletTotal!) })
      return [orgEvent(intent.orgId, `transaction.${cycle.kind}.settled`, data, now)]
    }
    const plan =
      cycle.kind === 'deposit'
        ? planDepositSettlement(intents, price, { ...base, events: settled })
        : planRedeemSettlement(intents, price, vault.payoutMode, { ...base, events: settled })
    const cycleData: Record<string, unknown> = { vaultId: vault.id, cycleKind: cycle.kind, settlementCycle: cycle.number, cycleId: cycle.id, sharePrice: formatPrice(price), digest, intents: intents.length }
    if (cycle.kind === 'deposit') Object.assign(cycleData, { totalAmount: format(plan.totalAmount), mintedShares: format(plan.totalShares) })
    else Object.assign(cycleData, { totalShares: format(plan.totalShares), netProceeds: format(plan.totalAmount), fee: format(plan.fee) })
    const outcome: repo.CycleOutcome = { state: 'settled', finishedAt: now, price, totalAmount: plan.totalAmount, totalShares: plan.totalShares, fee: plan.fee }
    await this.commit(cycle, plan, outcome, orgEvent(null, 'vault.cycle.settled', cycleData, now), alongside)
    return this.require(cycleId)
  }

  /** Rolls back an open or closed cycle: every intent cancelled (reason rollback), everything given back exactly. */
  async rollback(cycleId: string, alongside?: AlongsideWrite): Promise<vaultsRepo.CycleRecord> {
    let cycle = await this.close(cycleId)
    if (cycle.state === 'rolled_back') return cycle
    if (cycle.state === 'settled') throw new ApiError('conflict', `Cycle ${cycleId} is settled`, { field: 'cycleId' })
    const vault = await this.deps.vaults.require(cycle.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const format = (value: bigint) => formatAmount(value, decimals)
    const now = this.deps.vaults.now()
    const intents = await repo.confirmedIntents(this.deps.db, cycle.id)
    const cancelled = (intent: repo.IntentWithAccount, result: IntentResult): EventRow[] => {
      const data: Record<string, unknown> = {
        intentId: intent.id,
        accountId: intent.accountId,
        externalId: intent.externalId,
        vaultId: vault.id,
        recordId: intent.recordId,
        reason: 'rollback',
        digest: intentDigest(intent.id, 'rollback'),
        settlementCycle: cycle.number,
      }
      if (cycle.kind === 'deposit') data.amount = format(result.amount)
      else data.shares = format(result.shares)
      return [orgEvent(intent.orgId, cycle.kind === 'deposit' ? 'transaction.deposit.cancelled' : 'transaction.redeem.cancelled', data, now)]
    }
    const plan = planRollback(intents, cycle.kind, { vaultId: vault.id, asset: vault.asset, cycleId: cycle.id, at: now, movementKind: `vault_${cycle.kind}_rollback`, events: cancelled })
    const cycleData: Record<string, unknown> = { vaultId: vault.id, cycleKind: cycle.kind, settlementCycle: cycle.number, cycleId: cycle.id, intents: intents.length }
    if (cycle.kind === 'deposit') cycleData.totalAmount = format(plan.totalAmount)
    else cycleData.totalShares = format(plan.totalShares)
    const outcome: repo.CycleOutcome = { state: 'rolled_back', finishedAt: now, price: null, totalAmount: plan.totalAmount, totalShares: plan.totalShares, fee: 0n }
    await this.commit(cycle, plan, outcome, orgEvent(null, 'vault.cycle.rolled_back', cycleData, now), alongside)
    return this.require(cycleId)
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
   * cycle has run that long, and settles cycles left closed (a crash between close and settle).
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
        await this.settle(open.id)
        settled += 1
      }
    }
    for (const cycle of await vaultsRepo.closedCycles(this.deps.db)) {
      const vault = await this.deps.vaults.require(cycle.vaultId)
      if ((cycle.kind === 'deposit' ? vault.depositCycleSeconds : vault.redeemCycleSeconds) === null) continue
      await this.settle(cycle.id)
      settled += 1
    }
    return settled
  }
}

/** An event row for a ledger operation; `orgId` null for platform-wide vault.* events. */
export function orgEvent(orgId: string | null, type: string, data: Record<string, unknown>, created: Date): EventRow {
  return { id: newId('evt'), orgId, type, data, createdAt: created }
}
