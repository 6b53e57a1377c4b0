import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import { ApiError } from '../../lib/errors.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { requireAsset } from '../../lib/assets.ts'
import type { Clock } from '../clock/clock.ts'
import { appendEvent } from '../events/writer.ts'
import type { VaultRecord } from '../vaults/repo.ts'
import type { VaultCatalog } from '../vaults/service.ts'
import type { SavePolicyInput, SavePolicyView } from './policy-model.ts'
import * as repo from './policy-repo.ts'
import type { Subscriptions } from './subscriptions.ts'
import type { OwnedOrganizations } from '../../platform/ownership.ts'

/** The event a skipped day sends (per account, to its organization). */
export const SAVE_POLICY_SKIPPED = 'account.save_policy.skipped'

export type SkipReason = 'vault_paused' | 'stale_price' | 'below_minimum' | 'account_frozen' | 'insufficient_available' | 'no_open_cycle'

const POLICIES_PER_PAGE = 500
const RUNS_SHOWN = 7

/** The UTC date an instant falls on (YYYY-MM-DD). */
export function utcDay(at: Date): string {
  return at.toISOString().slice(0, 10)
}

export interface SavePolicyDeps {
  db: Database
  ledger: Ledger
  /** The organizations' clocks: a policy runs once per UTC day of its organization's clock. */
  clock: Clock
  vaults: VaultCatalog
  subscriptions: Subscriptions
  /** In cluster mode, the organizations this server owns: a pass runs their policies only. */
  ownedOrganizations?: OwnedOrganizations
}

export interface SavePolicyPass {
  subscribed: number
  skipped: number
  nothingToInvest: number
  /** Accounts whose run failed unexpectedly: nothing was recorded, the next pass tries again. */
  failed: number
}

/** Another pass or instance recorded this account's day between our read and our commit. */
class DayAlreadyRun extends ApiError {
  constructor() {
    super('conflict', 'The save policy already ran for this account today')
  }
}

/**
 * Save policies: once a day per account, what its available balance holds above its spend buffer
 * is subscribed into its vault, through the ordinary subscription path.
 */
export class SavePolicies {
  constructor(private readonly deps: SavePolicyDeps) {}

  async put(orgId: string, accountId: string, input: SavePolicyInput): Promise<SavePolicyView> {
    await this.deps.ledger.accounts.require(orgId, accountId)
    const vault = await this.deps.vaults.require(input.vaultId, 'vaultId')
    const buffer = parseAmount(input.buffer, requireAsset(vault.asset).decimals, 'buffer', { allowZero: true })
    const now = this.deps.clock.now(orgId)
    const existing = await repo.findPolicy(this.deps.db, orgId, accountId)
    await repo.upsertPolicy(this.deps.db, { orgId, accountId, vaultId: vault.id, buffer, enabled: input.enabled, createdAt: existing?.createdAt ?? now, updatedAt: now })
    return this.get(orgId, accountId)
  }

  async get(orgId: string, accountId: string): Promise<SavePolicyView> {
    await this.deps.ledger.accounts.require(orgId, accountId)
    const policy = await repo.findPolicy(this.deps.db, orgId, accountId)
    if (!policy) throw new ApiError('not_found', `Account ${accountId} has no save policy`)
    const vault = await this.deps.vaults.require(policy.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const runs = await repo.listRuns(this.deps.db, orgId, accountId, RUNS_SHOWN)
    return {
      accountId,
      vaultId: policy.vaultId,
      asset: vault.asset,
      buffer: formatAmount(policy.buffer, decimals),
      enabled: policy.enabled,
      createdAt: policy.createdAt.toISOString(),
      updatedAt: policy.updatedAt.toISOString(),
      recentRuns: runs.map((run) => ({
        day: run.day,
        vaultId: run.vaultId,
        outcome: run.outcome,
        reason: run.reason,
        amount: run.amount === null ? null : formatAmount(run.amount, decimals),
        intentId: run.intentId,
        createdAt: run.createdAt.toISOString(),
      })),
    }
  }

  /**
   * The worker's step: every enabled policy whose account has not run today (its organization's
   * UTC date) runs now. One account's failure is logged and leaves its day unrecorded, so the next
   * pass retries it; it never stops the others.
   */
  /**
   * One pass over every enabled policy. A pass asked for while one runs in this process joins it:
   * two at once would race their subscriptions for the same account and day into one batch, where
   * the day's guard row refuses both (the database's unique day row still guards across processes).
   */
  runOnce(): Promise<SavePolicyPass> {
    this.running ??= this.runPass().finally(() => {
      this.running = undefined
    })
    return this.running
  }

  private running: Promise<SavePolicyPass> | undefined

  private async runPass(): Promise<SavePolicyPass> {
    const pass: SavePolicyPass = { subscribed: 0, skipped: 0, nothingToInvest: 0, failed: 0 }
    let after: { orgId: string; accountId: string } | undefined
    for (;;) {
      const page = await repo.enabledPolicies(this.deps.db, after, POLICIES_PER_PAGE, this.deps.ownedOrganizations)
      if (page.length === 0) return pass
      after = { orgId: page.at(-1)!.orgId, accountId: page.at(-1)!.accountId }
      const byOrg = new Map<string, repo.SavePolicyRecord[]>()
      for (const policy of page) byOrg.set(policy.orgId, [...(byOrg.get(policy.orgId) ?? []), policy])
      for (const [orgId, policies] of byOrg) {
        const day = utcDay(this.deps.clock.now(orgId))
        const done = await repo.accountsRunOn(this.deps.db, orgId, policies.map((policy) => policy.accountId), day)
        for (const policy of policies) {
          if (done.has(policy.accountId)) continue
          try {
            const outcome = await this.runPolicy(policy, day)
            if (outcome === 'subscribed') pass.subscribed += 1
            else if (outcome === 'skipped') pass.skipped += 1
            else if (outcome === 'nothing_to_invest') pass.nothingToInvest += 1
          } catch (error) {
            pass.failed += 1
            console.error(`save policy: the run of account ${policy.accountId} failed; the next pass retries it`, error)
          }
        }
      }
    }
  }

  /** One account's day; answers what was recorded, or undefined when another pass recorded it first. */
  private async runPolicy(policy: repo.SavePolicyRecord, day: string): Promise<repo.SavePolicyRunRecord['outcome'] | undefined> {
    const { orgId, accountId } = policy
    const vault = await this.deps.vaults.require(policy.vaultId)
    const account = await this.deps.ledger.accounts.require(orgId, accountId)
    const available = this.deps.ledger.balance(orgId, accountId, vault.asset)?.available ?? 0n
    const excess = available - policy.buffer
    const base = { orgId, accountId, day, vaultId: vault.id, createdAt: this.deps.clock.now(orgId) }
    if (excess <= 0n) return (await this.record({ ...base, outcome: 'nothing_to_invest', reason: null, amount: null, intentId: null }, account.externalId, vault)) ? 'nothing_to_invest' : undefined
    const skip = async (reason: SkipReason) => ((await this.record({ ...base, outcome: 'skipped', reason, amount: excess, intentId: null }, account.externalId, vault)) ? ('skipped' as const) : undefined)
    if (vault.state === 'paused') return skip('vault_paused')
    if (account.status === 'frozen') return skip('account_frozen')
    if (await this.priceIsStale(vault)) return skip('stale_price')
    if (excess < vault.minSubscription) return skip('below_minimum')
    const decimals = requireAsset(vault.asset).decimals
    try {
      await this.deps.subscriptions.create(
        orgId,
        { accountId, vaultId: vault.id, amount: formatAmount(excess, decimals) },
        {
          madeBy: 'save_policy',
          guardedWrites: (intentId) => [
            { write: (tx) => repo.insertRun(tx, { ...base, outcome: 'subscribed', reason: null, amount: excess, intentId }), refusal: () => new DayAlreadyRun() },
          ],
        },
      )
      return 'subscribed'
    } catch (error) {
      if (error instanceof DayAlreadyRun) return undefined
      const reason = error instanceof ApiError ? await this.reasonOf(error, vault.id) : undefined
      if (reason === undefined) throw error
      return skip(reason)
    }
  }

  private async priceIsStale(vault: VaultRecord): Promise<boolean> {
    try {
      return (await this.deps.vaults.currentPrice(vault)).stale
    } catch (error) {
      if (error instanceof ApiError && error.code === 'stale_price') return true
      throw error
    }
  }

  /** Why the subscription path refused (the state changed between the checks and the commit), or undefined for a failure to retry. */
  private async reasonOf(error: ApiError, vaultId: string): Promise<SkipReason | undefined> {
    switch (error.code) {
      case 'stale_price':
        return 'stale_price'
      case 'min_amount':
        return 'below_minimum'
      case 'insufficient_available':
        return 'insufficient_available'
      case 'account_frozen':
        return 'account_frozen'
      case 'conflict':
        return (await this.deps.vaults.require(vaultId)).state === 'paused' ? 'vault_paused' : 'no_open_cycle'
      default:
        return undefined
    }
  }

  /** Records a day that subscribed nothing; a skip sends its event in the same transaction. False when the day was recorded already. */
  private async record(run: repo.SavePolicyRunRecord, externalId: string, vault: VaultRecord): Promise<boolean> {
    return this.deps.db.transaction(async (tx) => {
      if (!(await repo.insertRun(tx, run))) return false
      if (run.outcome === 'skipped') {
        const data = {
          accountId: run.accountId,
          externalId,
          vaultId: vault.id,
          day: run.day,
          reason: run.reason,
          amount: formatAmount(run.amount!, requireAsset(vault.asset).decimals),
        }
        await appendEvent(tx, { orgId: run.orgId, type: SAVE_POLICY_SKIPPED, data, created: run.createdAt })
      }
      return true
    })
  }
}
