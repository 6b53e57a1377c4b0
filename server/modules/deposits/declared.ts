import { eventRow, type EventRow } from '../events/write-sets.ts'
import type { DepositRow } from './write-sets.ts'
import { notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { writeWithAnswer } from '../../platform/idempotency-in-commit.ts'
import { ensureAddress } from './addresses.ts'
import { SWEEP_BATCH_MAX, wakeSweepFor, type DepositsContext } from './context.ts'
import type { CreateDepositInput, DepositView } from './model.ts'
import * as repo from './repo.ts'
import type { DepositRecord } from './repo.ts'
import { decimalsOf, iso, resolveRail } from './rules.ts'

// Declared deposits: what a partner says will arrive, the rule that matches an arrival to one,
// the event a completed deposit emits, and the expiry of those nothing arrived for.

/** A declared deposit is matched by arrivals observed within this long on the organization's clock. */
export const DECLARED_DEPOSIT_LIFETIME_MS = 24 * 3600 * 1000

export function toDepositView(row: DepositRow): DepositView {
  const decimals = decimalsOf(row.asset)
  const amount = (value: bigint | null | undefined) => (value == null ? null : formatAmount(value, decimals))
  return {
    id: row.id,
    intentId: intentIdOf(row),
    accountId: row.accountId,
    asset: row.asset,
    network: row.network,
    source: row.source,
    state: row.state,
    expectedAmount: amount(row.expectedAmount),
    receivedAmount: amount(row.receivedAmount),
    amountMatch: row.amountMatch ?? null,
    address: row.address,
    depositAddressId: row.depositAddressId ?? null,
    txHash: row.txHash ?? null,
    fundingInstructions:
      row.source === 'declared' && row.expectedAmount != null && row.expiresAt
        ? { network: row.network, asset: row.asset, address: row.address, amount: formatAmount(row.expectedAmount, decimals), expiresAt: row.expiresAt.toISOString() }
        : null,
    expiresAt: iso(row.expiresAt),
    createdAt: row.createdAt.toISOString(),
    arrivedAt: iso(row.arrivedAt),
    completedAt: iso(row.completedAt),
  }
}

/**
 * Declares a deposit: the answer's funding instructions name the account's deposit address on the
 * rail (created if it has none), the amount and the expiry. Nothing moves until funds arrive.
 */
export async function createDeposit(context: DepositsContext, orgId: string, input: CreateDepositInput): Promise<DepositView> {
  const info = resolveRail(input.asset, input.network)
  const expectedMinor = parseAmount(input.amount, info.decimals, 'amount')
  const account = await context.ledger.accounts.require(orgId, input.accountId, 'accountId')
  const { row: address } = await ensureAddress(context, orgId, account.id, info)
  const now = context.clock.now(orgId)
  const row: DepositRecord = {
    id: newId('dep'),
    orgId,
    accountId: account.id,
    asset: info.asset,
    network: info.network,
    source: 'declared',
    state: 'awaiting_funds',
    expectedAmount: expectedMinor,
    receivedAmount: null,
    amountMatch: null,
    depositAddressId: address.id,
    address: address.address,
    arrivalId: null,
    txHash: null,
    expiresAt: new Date(now.getTime() + DECLARED_DEPOSIT_LIFETIME_MS),
    createdAt: now,
    arrivedAt: null,
    completedAt: null,
  }
  await writeWithAnswer(context.db, (executor) => repo.insertDeposit(executor, row), () => toDepositView(row))
  wakeSweepFor(context, orgId, row.expiresAt!)
  return toDepositView(row)
}

export async function getDeposit(context: DepositsContext, orgId: string, id: string): Promise<DepositView> {
  const row = await repo.findDeposit(context.db, orgId, id)
  if (!row) throw notFound('deposit')
  return toDepositView(row)
}

export async function listDeposits(context: DepositsContext, orgId: string, query: { accountId?: string; after?: string; limit?: number }): Promise<{ deposits: DepositView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listDeposits(context.db, orgId, { accountId: query.accountId, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toDepositView)
  return { deposits: page.items, hasMore: page.hasMore }
}

/**
 * The matching rule: among the declared deposits still awaiting funds at the address (same asset,
 * not expired at the arrival's observation on the organization's clock), the oldest whose amount
 * is exactly the arrival's; otherwise the oldest of them (under- or over-delivery).
 */
export function matchDeclared(candidates: DepositRecord[], amountMinor: bigint, observedMs: number): DepositRecord | undefined {
  const open = candidates.filter((row) => row.expiresAt !== null && observedMs < row.expiresAt.getTime())
  return open.find((row) => row.expectedAmount === amountMinor) ?? open[0]
}

export function amountMatchOf(expected: bigint, received: bigint): 'exact' | 'under' | 'over' {
  return received === expected ? 'exact' : received < expected ? 'under' : 'over'
}

/**
 * A funding deposit's event type. The contract's `transaction.deposit.*` and `transaction.redeem.*`
 * belong to vault deposit and redeem intents (they carry vaultId, recordId, shares); a deposit that
 * funds an account has names of its own.
 */
export const FUNDING_DEPOSIT_CONFIRMED = 'funding.deposit.confirmed'

/**
 * The intent id of a declared deposit, in the contract's shape `txi_<id>`: the same UUIDv7 as its
 * deposit id, so either names the other. Deposits that arrived undeclared were no intent and have none.
 */
export function intentIdOf(deposit: Pick<DepositRow, 'id' | 'source'>): string | null {
  return deposit.source === 'declared' ? `txi_${deposit.id.slice('dep_'.length)}` : null
}

export function confirmedEvent(deposit: DepositRow, externalId: string | null, now: Date): EventRow {
  return eventRow(
    deposit.orgId,
    FUNDING_DEPOSIT_CONFIRMED,
    {
      ...(deposit.source === 'declared' ? { intentId: intentIdOf(deposit) } : {}),
      depositId: deposit.id,
      accountId: deposit.accountId,
      externalId,
      asset: deposit.asset,
      network: deposit.network,
      amount: formatAmount(deposit.receivedAmount!, decimalsOf(deposit.asset)),
      digest: deposit.txHash,
      source: deposit.source,
      amountMatch: deposit.amountMatch ?? null,
    },
    now,
  )
}

/** Declared deposits nothing arrived for by their expiry become `expired` (a later arrival still credits, as a deposit-address deposit). */
export function expireDueDeposits(context: DepositsContext, orgId?: string): Promise<number> {
  return context.serialized(async () => {
    const due = (await repo.awaitingDepositsExpiringBy(context.db, new Date(context.clock.latestNowMs()), SWEEP_BATCH_MAX, context.ownedOrganizations)).filter(
      (row) => (orgId === undefined || row.orgId === orgId) && context.clock.nowMs(row.orgId) >= row.expiresAt!.getTime(),
    )
    return repo.expireDeposits(
      context.db,
      due.map((row) => row.id),
    )
  })
}
