import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import type { ChainArrivalRow, DepositRow } from './write-sets.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'
import { toArrivalView } from './arrivals.ts'
import type { DepositsContext } from './context.ts'
import { confirmedEvent } from './declared.ts'
import type { ChainArrivalView } from './model.ts'
import * as repo from './repo.ts'
import type { ArrivalRecord } from './repo.ts'
import { arrivalStillIn } from './rules.ts'

// Suspense: final arrivals that matched no deposit address of their organization, which an
// operator assigns to an account or returns.

async function requireSuspense(context: DepositsContext, arrivalId: string): Promise<ArrivalRecord> {
  const arrival = await repo.findArrival(context.db, arrivalId)
  if (!arrival || arrival.disposition === 'deposit') throw notFound('suspense arrival')
  if (arrival.disposition !== 'suspense') throw new ApiError('conflict', `Arrival ${arrivalId} was already ${arrival.disposition}`)
  if (arrival.state !== 'final') throw new ApiError('conflict', `Arrival ${arrivalId} is still confirming; it can be resolved from ${arrival.finalAt.toISOString()}`)
  return arrival
}

/** Credits a final suspense arrival to an account of its organization: a completed deposit with source `suspense_assignment`. */
export function assignSuspense(context: DepositsContext, arrivalId: string, input: { accountId: string; note?: string }): Promise<ChainArrivalView> {
  return context.serialized(async () => {
    const arrival = await requireSuspense(context, arrivalId)
    const account = await context.ledger.accounts.require(arrival.orgId, input.accountId, 'accountId')
    const now = context.clock.now(arrival.orgId)
    const deposit: DepositRow = {
      id: newId('dep'),
      orgId: arrival.orgId,
      accountId: account.id,
      asset: arrival.asset,
      network: arrival.network,
      source: 'suspense_assignment',
      state: 'completed',
      expectedAmount: null,
      receivedAmount: arrival.amount,
      amountMatch: null,
      depositAddressId: null,
      address: arrival.address,
      arrivalId: arrival.id,
      txHash: arrival.txHash,
      expiresAt: null,
      createdAt: now,
      arrivedAt: arrival.observedAt,
      completedAt: now,
    }
    const assigned: ChainArrivalRow = { ...arrival, disposition: 'assigned', accountId: account.id, depositId: deposit.id, resolvedAt: now, resolutionNote: input.note ?? null }
    const view = toArrivalView(context, assigned)
    await context.ledger.submit({
      orgId: arrival.orgId,
      movementId: newId('mv'),
      movementKind: 'suspense_assign',
      reference: arrival.id,
      createdAt: now,
      postings: [
        { accountId: SYSTEM_ACCOUNTS.suspense, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: -arrival.amount },
        { accountId: account.id, kind: 'customer', bucket: 'available', asset: arrival.asset, amountMinor: arrival.amount },
      ],
      guardedWrites: [arrivalStillIn(arrival.id, 'final', 'suspense', { disposition: 'assigned', accountId: account.id, depositId: deposit.id, resolvedAt: now })],
      chainArrivals: [assigned],
      deposits: [deposit],
      events: [confirmedEvent(deposit, account.externalId, now)],
      idempotencyRecord: answerInCommit(view),
    })
    return view
  })
}

/**
 * Sends a final suspense arrival back: the amount leaves suspense for chain clearing (the wallet
 * pays it out). The simulator does not model the outgoing return transfer itself.
 */
export function returnSuspense(context: DepositsContext, arrivalId: string, input: { note?: string }): Promise<ChainArrivalView> {
  return context.serialized(async () => {
    const arrival = await requireSuspense(context, arrivalId)
    const now = context.clock.now(arrival.orgId)
    const returned: ChainArrivalRow = { ...arrival, disposition: 'returned', resolvedAt: now, resolutionNote: input.note ?? null }
    const view = toArrivalView(context, returned)
    const postings: Posting[] = [
      { accountId: SYSTEM_ACCOUNTS.suspense, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: -arrival.amount },
      { accountId: SYSTEM_ACCOUNTS.chainClearing, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: arrival.amount },
    ]
    await context.ledger.submit({
      orgId: arrival.orgId,
      movementId: newId('mv'),
      movementKind: 'suspense_return',
      reference: arrival.id,
      createdAt: now,
      postings,
      guardedWrites: [arrivalStillIn(arrival.id, 'final', 'suspense', { disposition: 'returned', resolvedAt: now })],
      chainArrivals: [returned],
      idempotencyRecord: answerInCommit(view),
    })
    return view
  })
}

export async function listSuspense(
  context: DepositsContext,
  query: { orgId?: string; disposition?: 'suspense' | 'assigned' | 'returned'; after?: string; limit?: number },
): Promise<{ arrivals: ChainArrivalView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listSuspense(context.db, { ...query, limit: limit + 1 })
  const page = onePage(rows, limit, (row) => toArrivalView(context, row))
  return { arrivals: page.items, hasMore: page.hasMore }
}

export async function getSuspense(context: DepositsContext, arrivalId: string): Promise<ChainArrivalView> {
  const arrival = await repo.findArrival(context.db, arrivalId)
  if (!arrival || arrival.disposition === 'deposit') throw notFound('suspense arrival')
  return toArrivalView(context, arrival)
}
