import { ApiError, invalid } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { answerInCommit, forgetAnswerInCommit, writeWithAnswer } from '../../platform/idempotency-in-commit.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { assertCanSend } from '../../ledger/accounts.ts'
import { requireAsset } from '../../lib/assets.ts'
import { valueOf } from '../vaults/prices.ts'
import * as vaultsRepo from '../vaults/repo.ts'
import { sharesAsset } from '../vaults/service.ts'
import { orgEvent } from './cycles.ts'
import type { CreateRedemptionInput, RedemptionView } from './model.ts'
import { customer } from './plan.ts'
import * as repo from './repo.ts'
import type { InstantRedemptions } from './instant.ts'
import { requireActiveVault, type IntentDeps } from './subscriptions.ts'
import { intentDigest, toRedemptionView } from './views.ts'

/** Redemptions (queued in the vault's redeem cycle) and claims of claimable proceeds. */
export class Redemptions {
  constructor(
    private readonly deps: IntentDeps,
    private readonly instant: InstantRedemptions,
  ) {}

  async create(orgId: string, input: CreateRedemptionInput): Promise<RedemptionView> {
    if (input.mode === 'instant') return this.instant.execute(orgId, input)
    if (input.quoteId !== undefined) throw invalid('quoteId', 'A queued redemption takes no quote (its price is the cycle\'s)')
    if (input.shares === undefined) throw invalid('shares', 'A queued redemption names the shares to redeem')
    const vault = await requireActiveVault(this.deps.vaults, input.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const shares = parseAmount(input.shares, decimals, 'shares')
    if (shares < vault.minRedemption) throw new ApiError('min_amount', `The minimum redemption from ${vault.id} is ${formatAmount(vault.minRedemption, decimals)} shares`, { field: 'shares' })
    const account = await this.deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
    assertCanSend(account, 'accountId')
    const current = await this.deps.vaults.currentPrice(vault)
    for (let attempt = 0; ; attempt++) {
      const cycle = await vaultsRepo.openCycle(this.deps.db, vault.id, 'redeem')
      if (!cycle) throw new ApiError('conflict', `Vault ${vault.id} has no open redeem cycle`, { field: 'vaultId' })
      const now = this.deps.clock.now(orgId)
      const row: repo.IntentRecord = {
        id: newId('txi'),
        orgId,
        accountId: account.id,
        vaultId: vault.id,
        kind: 'redeem',
        mode: 'cycle',
        cycleId: cycle.id,
        recordId: newId('rec'),
        state: 'confirmed',
        reason: null,
        amount: null,
        fee: 0n,
        shares,
        payout: null,
        claimedAt: null,
        quoteId: null,
        createdAt: now,
        settledAt: null,
      }
      const data: Record<string, unknown> = {
        intentId: row.id,
        accountId: account.id,
        externalId: account.externalId,
        vaultId: vault.id,
        recordId: row.recordId,
        shares: formatAmount(shares, decimals),
        digest: intentDigest(row.id, 'redeem'),
        settlementCycle: cycle.number,
      }
      if (vault.payoutMode === 'direct') data.estimatedProceeds = formatAmount(valueOf(shares, current.price), decimals)
      const closed = new ApiError('conflict', 'The cycle closed while this request was written; retry', { field: 'vaultId' })
      const view = toRedemptionView(row, cycle.number, decimals)
      try {
        await this.deps.ledger.submit({
          orgId,
          movementId: newId('mv'),
          movementKind: 'vault_redemption_lock',
          reference: row.id,
          createdAt: now,
          postings: [customer(account.id, 'available', sharesAsset(vault.id), -shares), customer(account.id, 'held', sharesAsset(vault.id), shares)],
          events: [orgEvent(orgId, 'transaction.redeem.confirmed', data, now)],
          guardedWrites: [{ write: (tx) => repo.insertIntentInOpenCycle(tx, row), refusal: () => closed }],
          idempotencyRecord: answerInCommit(view),
        })
      } catch (error) {
        if (error === closed && attempt < 2) {
          // The next attempt answers another intent: its commit carries the key's record anew.
          forgetAnswerInCommit()
          continue
        }
        if (error instanceof ApiError && error.code === 'insufficient_available') throw new ApiError('insufficient_available', `Account ${account.id} has fewer than ${formatAmount(shares, decimals)} free shares of ${vault.id}`, { field: 'shares' })
        throw error
      }
      return view
    }
  }

  /** Collects every settled, unclaimed claimable redemption of the account in the vault: one movement to available. */
  async claim(orgId: string, input: { accountId: string; vaultId: string }) {
    const vault = await this.deps.vaults.require(input.vaultId, 'vaultId')
    const decimals = requireAsset(vault.asset).decimals
    const account = await this.deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
    const intents = await repo.claimableIntents(this.deps.db, orgId, account.id, vault.id)
    if (intents.length === 0) throw new ApiError('not_found', `Account ${account.id} has nothing to claim from ${vault.id}`, { field: 'vaultId' })
    const amount = intents.reduce((sum, intent) => sum + intent.amount!, 0n)
    const now = this.deps.clock.now(orgId)
    const ids = intents.map((intent) => intent.id)
    const digest = intentDigest(ids[0]!, 'claim')
    const claimedMeanwhile = new ApiError('conflict', 'These proceeds were claimed meanwhile', { field: 'vaultId' })
    const view = { accountId: account.id, vaultId: vault.id, amount: formatAmount(amount, decimals), intentIds: ids, digest }
    if (amount === 0n) {
      // Nothing moves, but the intents are marked claimed: that write and the key's record commit together.
      await writeWithAnswer(this.deps.db, (executor) => repo.markClaimed(executor, ids, now), () => view)
      return view
    }
    await this.deps.ledger.submit({
      orgId,
      movementId: newId('mv'),
      movementKind: 'vault_claim',
      reference: ids[0]!,
      createdAt: now,
      postings: [customer(account.id, 'in_flight', vault.asset, -amount), customer(account.id, 'available', vault.asset, amount)],
      events: [orgEvent(orgId, 'transaction.claim.confirmed', { accountId: account.id, externalId: account.externalId, vaultId: vault.id, amount: view.amount, intentIds: ids, digest }, now)],
      guardedWrites: [{ write: (tx) => repo.markClaimed(tx, ids, now), refusal: () => claimedMeanwhile }],
      idempotencyRecord: answerInCommit(view),
    })
    return view
  }

  async get(orgId: string, id: string): Promise<RedemptionView> {
    const intent = await repo.findIntent(this.deps.db, orgId, id)
    if (!intent || intent.kind !== 'redeem') throw new ApiError('not_found', 'No such redemption')
    const cycle = intent.cycleId === null ? undefined : await vaultsRepo.findCycle(this.deps.db, intent.cycleId)
    return toRedemptionView(intent, cycle?.number ?? null, requireAsset((await this.deps.vaults.require(intent.vaultId)).asset).decimals)
  }
}
