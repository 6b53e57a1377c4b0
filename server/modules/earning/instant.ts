import { sql } from 'drizzle-orm'
import { queryRows, type Transaction } from '../../../db/client.ts'
import { assertCanSend } from '../../ledger/accounts.ts'
import { SYSTEM_ACCOUNTS } from '../../ledger/hot-balances.ts'
import { ApiError, invalid } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { requireAsset } from '../../lib/assets.ts'
import type { CreateInstantRedeemQuoteInput } from '../quotes/model.ts'
import { findQuote, markQuoteConsumed, type QuoteRecord } from '../quotes/repo.ts'
import type { InstantRedeemPrice } from '../quotes/service.ts'
import { feeFor, valueOf } from '../vaults/prices.ts'
import type { VaultRecord } from '../vaults/repo.ts'
import { sharesAsset } from '../vaults/service.ts'
import { orgEvent } from './cycles.ts'
import type { RedemptionView } from './model.ts'
import { customer, issuerAccount, nonZero, system, venueAccount } from './plan.ts'
import * as repo from './repo.ts'
import { requireActiveVault, type IntentDeps } from './subscriptions.ts'
import { intentDigest, toRedemptionView } from './views.ts'

function bufferShort(vault: VaultRecord, grossMinor: bigint, decimals: number): ApiError {
  return new ApiError(
    'limit_exceeded',
    `The instant-redemption buffer of ${vault.id} (${formatAmount(vault.instantBuffer, decimals)}) cannot cover ${formatAmount(grossMinor, decimals)}; redeem with mode queued`,
    { field: 'shares' },
  )
}

/** Takes the gross amount out of the vault's buffer on the ledger's transaction: false when the buffer no longer covers it. */
async function takeFromBuffer(tx: Transaction, vaultId: string, grossMinor: bigint): Promise<boolean> {
  const rows = await queryRows(tx, sql`update vaults set instant_buffer = instant_buffer - ${grossMinor.toString()}::numeric where id = ${vaultId} and instant_buffer >= ${grossMinor.toString()}::numeric returning id`)
  return rows.length === 1
}

/**
 * Instant redemptions: paid at once from the vault's buffer, only through an instant_redeem quote,
 * which itemizes the fee (the fee is never taken without one) and executes once.
 */
export class InstantRedemptions {
  constructor(private readonly deps: IntentDeps) {}

  /** Prices an instant redemption for a quote: the shares' value now, the fee, and what reaches available. */
  async price(orgId: string, input: CreateInstantRedeemQuoteInput): Promise<InstantRedeemPrice> {
    const vault = await requireActiveVault(this.deps.vaults, input.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const shares = parseAmount(input.shares, decimals, 'shares')
    if (shares < vault.minRedemption) throw new ApiError('min_amount', `The minimum redemption from ${vault.id} is ${formatAmount(vault.minRedemption, decimals)} shares`, { field: 'shares' })
    const account = await this.deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
    const free = this.deps.ledger.balance(orgId, account.id, sharesAsset(vault.id))?.available ?? 0n
    if (free < shares) throw new ApiError('insufficient_available', `Account ${account.id} has fewer than ${input.shares} free shares of ${vault.id}`, { field: 'shares' })
    const price = await this.deps.vaults.freshPrice(vault)
    const grossMinor = valueOf(shares, price)
    const feeMinor = feeFor(grossMinor, vault.instantFeeBps)
    if (grossMinor <= feeMinor) throw new ApiError('min_amount', 'These shares are worth no more than the instant-redemption fee', { field: 'shares' })
    if (grossMinor > vault.instantBuffer) throw bufferShort(vault, grossMinor, decimals)
    return { accountId: account.id, vaultId: vault.id, asset: vault.asset, shares, grossMinor, feeMinor, netMinor: grossMinor - feeMinor }
  }

  /** Executes an instant_redeem quote once: shares burnt, the net to available, the fee to the fee account, the gross out of the buffer. */
  async execute(orgId: string, input: { accountId: string; vaultId: string; quoteId?: string; shares?: string }): Promise<RedemptionView> {
    if (input.quoteId === undefined) throw invalid('quoteId', 'An instant redemption executes an instant_redeem quote (POST /v1/quotes), which itemizes its fee')
    if (input.shares !== undefined) throw invalid('shares', 'An instant redemption takes its shares from its quote')
    const quote = await findQuote(this.deps.db, orgId, input.quoteId)
    if (!quote) throw new ApiError('not_found', 'No such quote', { field: 'quoteId' })
    if (quote.kind !== 'instant_redeem') throw invalid('quoteId', `Quote ${quote.id} is a ${quote.kind} quote`)
    if (quote.accountId !== input.accountId || quote.vaultId !== input.vaultId) throw invalid('quoteId', `Quote ${quote.id} was made for another account or vault`)
    const vault = await requireActiveVault(this.deps.vaults, input.vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const account = await this.deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
    assertCanSend(account, 'accountId')
    const now = this.deps.clock.now(orgId)
    if (quote.state === 'consumed') throw new ApiError('quote_consumed', `Quote ${quote.id} was already executed`, { field: 'quoteId' })
    if (quote.expiresAt.getTime() <= now.getTime()) throw new ApiError('quote_expired', `Quote ${quote.id} expired at ${quote.expiresAt.toISOString()}`, { field: 'quoteId' })
    const shares = quote.shares!
    const row: repo.IntentRecord = {
      id: newId('txi'),
      orgId,
      accountId: account.id,
      vaultId: vault.id,
      kind: 'redeem',
      mode: 'instant',
      cycleId: null,
      recordId: newId('rec'),
      state: 'settled',
      reason: null,
      amount: quote.amount,
      fee: quote.serviceFee,
      shares,
      payout: 'direct',
      claimedAt: null,
      quoteId: quote.id,
      createdAt: now,
      settledAt: now,
    }
    const base = { intentId: row.id, accountId: account.id, externalId: account.externalId, vaultId: vault.id, recordId: row.recordId, mode: 'instant', quoteId: quote.id }
    const digest = intentDigest(row.id, 'instant')
    const format = (value: bigint) => formatAmount(value, decimals)
    const consumed = quoteRefusal(quote)
    const view = toRedemptionView(row, null, decimals)
    try {
      await this.deps.ledger.submit({
        orgId,
        movementId: newId('mv'),
        movementKind: 'vault_instant_redemption',
        reference: row.id,
        createdAt: now,
        postings: nonZero([
          customer(account.id, 'available', sharesAsset(vault.id), -shares),
          system(issuerAccount(vault.id), sharesAsset(vault.id), shares),
          system(venueAccount(vault.id), vault.asset, -quote.totalDebited),
          customer(account.id, 'available', vault.asset, quote.amount),
          system(SYSTEM_ACCOUNTS.fees, vault.asset, quote.serviceFee),
        ]),
        events: [
          orgEvent(orgId, 'transaction.redeem.confirmed', { ...base, shares: format(shares), digest }, now),
          orgEvent(orgId, 'transaction.redeem.settled', { ...base, shares: format(shares), amount: format(quote.amount), fee: format(quote.serviceFee), walletTotal: format(quote.amount), digest }, now),
        ],
        guardedWrites: [
          { write: async (tx) => (await markQuoteConsumed(tx, orgId, quote.id, now)) !== undefined, refusal: () => consumed },
          { write: (tx) => takeFromBuffer(tx, vault.id, quote.totalDebited), refusal: () => bufferShort(vault, quote.totalDebited, decimals) },
          { write: (tx) => repo.insertIntent(tx, row), refusal: () => consumed },
        ],
        idempotencyRecord: answerInCommit(view),
      })
    } catch (error) {
      if (error instanceof ApiError && error.code === 'insufficient_available') throw new ApiError('insufficient_available', `Account ${account.id} no longer has the quoted shares free`, { field: 'quoteId' })
      throw error
    }
    return view
  }
}

/** Why a quote could not be consumed on the commit: another execution got there first, or it expired meanwhile. */
function quoteRefusal(quote: QuoteRecord): ApiError {
  return new ApiError('quote_consumed', `Quote ${quote.id} was already executed or has expired`, { field: 'quoteId' })
}
