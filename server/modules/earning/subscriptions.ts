import type { Database } from '../../../db/client.ts'
import { assertCanSend } from '../../ledger/accounts.ts'
import { SYSTEM_ACCOUNTS } from '../../ledger/hot-balances.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { GuardedWrite } from '../../ledger/writer.ts'
import { ApiError } from '../../lib/errors.ts'
import { answerInCommit, forgetAnswerInCommit } from '../../platform/idempotency-in-commit.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Clock } from '../clock/clock.ts'
import { requireAsset } from '../../lib/assets.ts'
import { feeFor } from '../vaults/prices.ts'
import * as vaultsRepo from '../vaults/repo.ts'
import type { VaultCatalog } from '../vaults/service.ts'
import { orgEvent } from './cycles.ts'
import type { CreateSubscriptionInput, SubscriptionView } from './model.ts'
import { customer, nonZero, system } from './plan.ts'
import * as repo from './repo.ts'
import { intentDigest, toSubscriptionView } from './views.ts'

export interface IntentDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  vaults: VaultCatalog
}

/** A vault that takes new intents: it exists and is not paused. */
export async function requireActiveVault(vaults: VaultCatalog, vaultId: string): Promise<vaultsRepo.VaultRecord> {
  const vault = await vaults.require(vaultId, 'vaultId')
  if (vault.state === 'paused') throw new ApiError('conflict', `Vault ${vaultId} is paused: subscriptions and redemptions are refused until it is unpaused`, { field: 'vaultId' })
  return vault
}

/** The refusal of an intent whose cycle closed between the read and the commit; it is retried in the next cycle. */
class CycleClosedMeanwhile extends ApiError {
  constructor() {
    super('conflict', 'The cycle closed while this request was written; retry', { field: 'vaultId' })
  }
}

/** What a subscription made on an account's behalf (its save policy) adds: a mark in its event, and writes in its commit. */
export interface SubscriptionOrigin {
  madeBy: 'save_policy'
  /** Conditional writes committed with the intent (given its id), before it. */
  guardedWrites(intentId: string): GuardedWrite[]
}

/** Subscriptions: deposit intents in a vault's open deposit cycle, and their cancellation. */
export class Subscriptions {
  constructor(private readonly deps: IntentDeps) {}

  async create(orgId: string, input: CreateSubscriptionInput, origin?: SubscriptionOrigin): Promise<SubscriptionView> {
    const vault = await requireActiveVault(this.deps.vaults, input.vaultId)
    const info = requireAsset(vault.asset)
    const amount = parseAmount(input.amount, info.decimals, 'amount')
    if (amount < vault.minSubscription) {
      throw new ApiError('min_amount', `The minimum subscription to ${vault.id} is ${formatAmount(vault.minSubscription, info.decimals)}`, { field: 'amount' })
    }
    await this.deps.vaults.freshPrice(vault)
    const account = await this.deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
    assertCanSend(account, 'accountId')
    const fee = feeFor(amount, vault.subscriptionFeeBps)
    if (fee >= amount) throw new ApiError('min_amount', 'The amount does not cover the subscription fee', { field: 'amount' })
    // A cycle that closes between reading it and the commit refuses the intent; it goes to the next one.
    for (let attempt = 0; ; attempt++) {
      const cycle = await vaultsRepo.openCycle(this.deps.db, vault.id, 'deposit')
      if (!cycle) throw new ApiError('conflict', `Vault ${vault.id} has no open deposit cycle`, { field: 'vaultId' })
      try {
        return await this.submit(orgId, account.id, account.externalId, vault, cycle, amount, fee, info.decimals, origin)
      } catch (error) {
        if (error instanceof CycleClosedMeanwhile && attempt < 2) {
          // The next attempt answers another intent: its commit carries the key's record anew.
          if (!origin) forgetAnswerInCommit()
          continue
        }
        throw error
      }
    }
  }

  private async submit(orgId: string, accountId: string, externalId: string, vault: vaultsRepo.VaultRecord, cycle: vaultsRepo.CycleRecord, amount: bigint, fee: bigint, decimals: number, origin?: SubscriptionOrigin): Promise<SubscriptionView> {
    const now = this.deps.clock.now(orgId)
    const net = amount - fee
    const row: repo.IntentRecord = {
      id: newId('txi'),
      orgId,
      accountId,
      vaultId: vault.id,
      kind: 'deposit',
      mode: 'cycle',
      cycleId: cycle.id,
      recordId: newId('rec'),
      state: 'confirmed',
      reason: null,
      amount: net,
      fee,
      shares: null,
      payout: null,
      claimedAt: null,
      quoteId: null,
      createdAt: now,
      settledAt: null,
    }
    const data: Record<string, unknown> = {
      intentId: row.id,
      accountId,
      externalId,
      vaultId: vault.id,
      recordId: row.recordId,
      amount: formatAmount(net, decimals),
      digest: intentDigest(row.id, 'deposit'),
      settlementCycle: cycle.number,
    }
    if (vault.subscriptionFeeBps > 0) data.fee = formatAmount(fee, decimals)
    if (origin) data.madeBy = origin.madeBy
    const view = toSubscriptionView(row, cycle.number, decimals)
    await this.deps.ledger.submit({
      orgId,
      movementId: newId('mv'),
      movementKind: 'vault_subscription',
      reference: row.id,
      createdAt: now,
      postings: nonZero([customer(accountId, 'available', vault.asset, -amount), customer(accountId, 'in_flight', vault.asset, net), system(SYSTEM_ACCOUNTS.fees, vault.asset, fee)]),
      events: [orgEvent(orgId, 'transaction.deposit.confirmed', data, now)],
      guardedWrites: [...(origin?.guardedWrites(row.id) ?? []), { write: (tx) => repo.insertIntentInOpenCycle(tx, row), refusal: () => new CycleClosedMeanwhile() }],
      // A request's Idempotency-Key commits with the intent (a save policy's subscription has none).
      idempotencyRecord: origin ? undefined : answerInCommit(view),
    })
    return view
  }

  /** Cancels a confirmed deposit intent while its cycle is open: its amount back, the fee withheld kept. */
  async cancel(orgId: string, recordId: string): Promise<SubscriptionView> {
    const intent = await repo.findIntentByRecord(this.deps.db, orgId, recordId)
    if (!intent || intent.kind !== 'deposit') throw new ApiError('not_found', `No subscription with record ${recordId}`, { field: 'recordId' })
    const vault = await this.deps.vaults.require(intent.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const cycle = await vaultsRepo.findCycle(this.deps.db, intent.cycleId!)
    if (intent.state !== 'confirmed') throw new ApiError('conflict', `Subscription ${intent.id} is ${intent.state}`, { field: 'recordId' })
    if (cycle?.state !== 'open') throw new ApiError('conflict', `The cycle of subscription ${intent.id} is ${cycle?.state}: only an open cycle's intents can be cancelled`, { field: 'recordId' })
    const account = await this.deps.ledger.accounts.require(orgId, intent.accountId)
    const now = this.deps.clock.now(orgId)
    const refused = () => new ApiError('conflict', `Subscription ${intent.id} can no longer be cancelled (cancelled already, or its cycle closed)`, { field: 'recordId' })
    const view = toSubscriptionView({ ...intent, state: 'cancelled', reason: 'cancelled' }, cycle.number, decimals)
    await this.deps.ledger.submit({
      orgId,
      movementId: newId('mv'),
      movementKind: 'vault_subscription_cancel',
      reference: intent.id,
      createdAt: now,
      postings: [customer(intent.accountId, 'in_flight', vault.asset, -intent.amount!), customer(intent.accountId, 'available', vault.asset, intent.amount!)],
      events: [
        orgEvent(
          orgId,
          'transaction.deposit.cancelled',
          {
            intentId: intent.id,
            accountId: intent.accountId,
            externalId: account.externalId,
            vaultId: vault.id,
            recordId,
            reason: 'cancelled',
            amount: formatAmount(intent.amount!, decimals),
            fee: formatAmount(intent.fee, decimals),
            digest: intentDigest(intent.id, 'cancel'),
            settlementCycle: cycle.number,
          },
          now,
        ),
      ],
      guardedWrites: [{ write: (tx) => repo.cancelIntentInOpenCycle(tx, intent.id), refusal: refused }],
      idempotencyRecord: answerInCommit(view),
    })
    return view
  }

  async get(orgId: string, id: string): Promise<SubscriptionView> {
    const intent = await repo.findIntent(this.deps.db, orgId, id)
    if (!intent || intent.kind !== 'deposit') throw new ApiError('not_found', 'No such subscription')
    const cycle = await vaultsRepo.findCycle(this.deps.db, intent.cycleId!)
    return toSubscriptionView(intent, cycle?.number ?? null, requireAsset((await this.deps.vaults.require(intent.vaultId)).asset).decimals)
  }
}
