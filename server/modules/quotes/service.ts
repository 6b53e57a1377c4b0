import type { Executor } from '../../../db/client.ts'
import { writeWithAnswer } from '../../platform/idempotency-in-commit.ts'
import { basisPointsCeil } from '../../ledger/policy.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { Clock } from '../clock/clock.ts'
import { findAsset, requireAsset } from '../../lib/assets.ts'
import type { CreateInstantRedeemQuoteInput, CreateQuoteInput, QuoteView } from './model.ts'
import * as repo from './repo.ts'

/** What quotes read: the database, the assets' policies (the ledger's) and the organizations' clocks. */
export interface QuotesDeps {
  db: Database
  ledger: Pick<Ledger, 'policy' | 'accounts'>
  clock: Clock
}

export function toQuoteView(row: repo.QuoteRecord, now: Date): QuoteView {
  const decimals = findAsset(row.asset)?.decimals ?? 0
  const format = (value: bigint) => formatAmount(value, decimals)
  const expired = row.state === 'open' && row.expiresAt.getTime() <= now.getTime()
  return {
    id: row.id,
    kind: row.kind,
    accountId: row.accountId,
    asset: row.asset,
    amount: format(row.amount),
    fees: { network: format(row.networkFee), service: format(row.serviceFee) },
    totalDebited: format(row.totalDebited),
    state: expired ? 'expired' : row.state,
    ...(row.kind === 'instant_redeem' ? { vaultId: row.vaultId!, shares: format(row.shares!) } : {}),
    expiresAt: row.expiresAt.toISOString(),
    createdAt: row.createdAt.toISOString(),
  }
}

/** What an instant redemption of some shares would pay, priced by earning (`InstantRedeemQuoter`). */
export interface InstantRedeemPrice {
  accountId: string
  vaultId: string
  asset: string
  shares: bigint
  /** The shares' value at the current price, rounded down. */
  grossMinor: bigint
  feeMinor: bigint
  netMinor: bigint
}

/** Prices an instant redemption (earning provides it; absent when earning is off). */
export type InstantRedeemQuoter = (orgId: string, input: CreateInstantRedeemQuoteInput) => Promise<InstantRedeemPrice>

/** An all-in, itemized price for a withdrawal or an instant redemption, executable once before it expires. */
export async function createQuote(deps: QuotesDeps, orgId: string, input: CreateQuoteInput, instantRedeem?: InstantRedeemQuoter): Promise<QuoteView> {
  if (input.kind === 'instant_redeem') {
    if (instantRedeem === undefined) throw new ApiError('invalid_request', 'Earning is not available on this service', { field: 'kind' })
    const priced = await instantRedeem(orgId, input)
    const now = deps.clock.now(orgId)
    const row = await repo.insertQuote(deps.db, {
      id: newId('qt'),
      orgId,
      kind: 'instant_redeem',
      accountId: priced.accountId,
      asset: priced.asset,
      amount: priced.netMinor,
      networkFee: 0n,
      serviceFee: priced.feeMinor,
      totalDebited: priced.grossMinor,
      vaultId: priced.vaultId,
      shares: priced.shares,
      state: 'open',
      expiresAt: new Date(now.getTime() + deps.ledger.policy(requireAsset(priced.asset).asset).quoteLifetimeSeconds * 1000),
      createdAt: now,
    })
    return toQuoteView(row, now)
  }
  const info = requireAsset(input.asset)
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  const policy = deps.ledger.policy(info.asset)
  if (amountMinor < policy.withdrawalMinMinor) {
    throw new ApiError('min_amount', `The minimum withdrawal is ${formatAmount(policy.withdrawalMinMinor, info.decimals)}`, { field: 'amount' })
  }
  if (amountMinor > policy.withdrawalMaxMinor) {
    throw new ApiError('limit_exceeded', `The maximum withdrawal is ${formatAmount(policy.withdrawalMaxMinor, info.decimals)}`, { field: 'amount' })
  }
  const account = await deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
  const now = deps.clock.now(orgId)
  const networkFee = policy.withdrawalNetworkFeeMinor
  const serviceFee = basisPointsCeil(amountMinor, policy.withdrawalServiceFeeBps)
  const quote: Parameters<typeof repo.insertQuote>[1] = {
    id: newId('qt'),
    orgId,
    kind: input.kind,
    accountId: account.id,
    asset: info.asset,
    amount: amountMinor,
    networkFee,
    serviceFee,
    totalDebited: amountMinor + networkFee + serviceFee,
    state: 'open',
    expiresAt: new Date(now.getTime() + policy.quoteLifetimeSeconds * 1000),
    createdAt: now,
  }
  const row = await writeWithAnswer(deps.db, (executor) => repo.insertQuote(executor, quote), (written) => toQuoteView(written, now))
  return toQuoteView(row, now)
}

export async function getQuote(deps: QuotesDeps, orgId: string, id: string): Promise<QuoteView> {
  const row = await repo.findQuote(deps.db, orgId, id)
  if (!row) throw notFound('quote')
  return toQuoteView(row, deps.clock.now(orgId))
}

/**
 * Executes a quote exactly once, for the module that acts on it (withdrawals). Run it on the same
 * transaction as the action, so a failed action leaves the quote open. `now` is the
 * organization's clock. Answers quote_consumed, quote_expired or not_found otherwise.
 */
export async function consumeQuote(executor: Executor, orgId: string, quoteId: string, now: Date): Promise<repo.QuoteRecord> {
  const consumed = await repo.markQuoteConsumed(executor, orgId, quoteId, now)
  if (consumed) return consumed
  const row = await repo.findQuote(executor, orgId, quoteId)
  if (!row) throw new ApiError('not_found', 'No such quote', { field: 'quoteId' })
  if (row.state === 'consumed') throw new ApiError('quote_consumed', `Quote ${quoteId} was already executed`, { field: 'quoteId' })
  throw new ApiError('quote_expired', `Quote ${quoteId} expired at ${row.expiresAt.toISOString()}`, { field: 'quoteId' })
}
