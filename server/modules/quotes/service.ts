import type { Executor } from '../../../db/client.ts'
import { writeWithAnswer } from '../../platform/idempotency.ts'
import { basisPointsCeil } from '../../ledger/policy.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Runtime } from '../../runtime.ts'
import { findAsset, requireAsset } from '../../lib/assets.ts'
import type { CreateQuoteInput, QuoteView } from './model.ts'
import * as repo from './repo.ts'

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
    expiresAt: row.expiresAt.toISOString(),
    createdAt: row.createdAt.toISOString(),
  }
}

/** An all-in, itemized price for a withdrawal, executable once before it expires. */
export async function createQuote(runtime: Runtime, orgId: string, input: CreateQuoteInput): Promise<QuoteView> {
  const info = requireAsset(input.asset)
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  const policy = runtime.ledger.policy(info.asset)
  if (amountMinor < policy.withdrawalMinMinor) {
    throw new ApiError('min_amount', `The minimum withdrawal is ${formatAmount(policy.withdrawalMinMinor, info.decimals)}`, { field: 'amount' })
  }
  if (amountMinor > policy.withdrawalMaxMinor) {
    throw new ApiError('limit_exceeded', `The maximum withdrawal is ${formatAmount(policy.withdrawalMaxMinor, info.decimals)}`, { field: 'amount' })
  }
  const account = await runtime.ledger.accounts.require(orgId, input.accountId, 'accountId')
  const now = runtime.clock.now(orgId)
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
  const row = await writeWithAnswer(runtime.db, (executor) => repo.insertQuote(executor, quote), (written) => toQuoteView(written, now))
  return toQuoteView(row, now)
}

export async function getQuote(runtime: Runtime, orgId: string, id: string): Promise<QuoteView> {
  const row = await repo.findQuote(runtime.db, orgId, id)
  if (!row) throw notFound('quote')
  return toQuoteView(row, runtime.clock.now(orgId))
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
