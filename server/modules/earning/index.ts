import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { OperatorIdempotencyPlugin } from '../../platform/operator-idempotency.ts'
import type { OwnedOrganizations } from '../../platform/ownership.ts'
import { requireAsset } from '../../lib/assets.ts'
import type { Clock } from '../clock/clock.ts'
import * as vaultsRepo from '../vaults/repo.ts'
import type { VaultsModule } from '../vaults/index.ts'
import type { AuditOperatorAction } from '../vaults/service.ts'
import { readCycleIntents } from './cycle-intents.ts'
import { Cycles, toCycleView, type CyclePartDispatch } from './cycles.ts'
import { allocationSource } from './positions.ts'
import { InstantRedemptions } from './instant.ts'
import { Accruals } from './accruals.ts'
import { earningPolicyRoutes } from './policy-routes.ts'
import { Redemptions } from './redemptions.ts'
import { SavePolicies } from './save-policy.ts'
import { earningOpsRoutes, earningRoutes, type CyclePartsAccess } from './routes.ts'
import { Subscriptions } from './subscriptions.ts'

export interface EarningModuleDeps {
  db: Database
  ledger: Ledger
  /** The organizations' clocks (intents' times). */
  clock: Clock
  vaults: VaultsModule
  access: AccessPlugin
  /** Idempotency-Key for the operator routes' writes. */
  opsIdempotency: OperatorIdempotencyPlugin
  /** Records the operator actions on cycles (close, settle, roll back) with their changes. */
  audit: AuditOperatorAction
  /** How often the worker syncs prices and runs the cycle cadence; 0 for never (tests call runOnce). */
  workerIntervalMs: number
  crashPoint: string | undefined
  /**
   * Cluster mode (docs/scale-out.md, "Earning in a cluster"): how a cycle's organizations' parts
   * reach their owners, which organizations' save policies this server runs, and whether it does
   * the platform-wide work (price sync, cycle cadence, accruals) now. Undefined outside a cluster.
   */
  cluster?: {
    parts: CyclePartDispatch
    partsAccess: CyclePartsAccess
    ownedOrganizations: OwnedOrganizations
    platformWork(): boolean
  }
}

const CYCLES_LISTED_MAX = 100

/** Subscriptions, redemptions, claims and the cycles that settle them. */
export function createEarningModule(deps: EarningModuleDeps) {
  const { catalog, venue } = deps.vaults
  const intentDeps = { db: deps.db, ledger: deps.ledger, clock: deps.clock, vaults: catalog }
  const subscriptions = new Subscriptions(intentDeps)
  const instant = new InstantRedemptions(intentDeps)
  const redemptions = new Redemptions(intentDeps, instant)
  const savePolicies = new SavePolicies({ db: deps.db, ledger: deps.ledger, clock: deps.clock, vaults: catalog, subscriptions, ownedOrganizations: deps.cluster?.ownedOrganizations })
  const accruals = new Accruals({ db: deps.db, ledger: deps.ledger, vaults: catalog })
  const cycles = new Cycles({ db: deps.db, ledger: deps.ledger, vaults: catalog, venue, crashPoint: deps.crashPoint, parts: deps.cluster?.parts })
  const listCycles = async (vaultId: string) => {
    const vault = await catalog.require(vaultId)
    const decimals = requireAsset(vault.asset).decimals
    return (await vaultsRepo.listCycles(deps.db, vaultId, CYCLES_LISTED_MAX)).map((row) => toCycleView(row, decimals))
  }
  /**
   * One pass of the worker: prices from the venue, then cycles whose cadence elapsed, save
   * policies and accruals. In a cluster the platform-wide steps run on one server only (the owner
   * of partition 0) and each server runs the save policies of the organizations it owns.
   */
  const runOnce = async () => {
    const platformWork = deps.cluster?.platformWork() ?? true
    if (platformWork) await catalog.syncPrices()
    const settled = platformWork ? await cycles.runOnce() : 0
    await savePolicies.runOnce()
    if (platformWork) await accruals.runOnce()
    return settled
  }
  let timer: ReturnType<typeof setInterval> | undefined
  let running = false
  return {
    subscriptions,
    redemptions,
    cycles,
    runOnce,
    allocations: allocationSource(deps.ledger, catalog),
    /** Prices instant_redeem quotes (POST /v1/quotes). */
    quoteInstantRedeem: (orgId: string, input: Parameters<InstantRedemptions['price']>[1]) => instant.price(orgId, input),
    savePolicies,
    accruals,
    routes: earningRoutes(subscriptions, redemptions, deps.access),
    policyRoutes: earningPolicyRoutes(savePolicies, accruals, deps.access),
    opsRoutes: earningOpsRoutes(deps.opsIdempotency, cycles, listCycles, (cycleId) => readCycleIntents({ db: deps.db, cycles, vaults: catalog }, cycleId), deps.audit, deps.cluster?.partsAccess),
    start() {
      if (deps.workerIntervalMs <= 0) return
      timer = setInterval(() => {
        if (running) return
        running = true
        runOnce()
          .catch((error) => console.error('earning: worker pass failed; the next pass retries', error))
          .finally(() => (running = false))
      }, deps.workerIntervalMs)
      timer.unref?.()
    },
    stop() {
      if (timer) clearInterval(timer)
    },
  }
}
