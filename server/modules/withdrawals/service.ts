import type { Executor } from '../../../db/client.ts'
import { assertCanSend } from '../../ledger/accounts.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'
import { eventRow } from '../events/write-sets.ts'
import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount } from '../../lib/money.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { Principal } from '../../platform/auth.ts'
import type { WithdrawalsContext } from './context.ts'
import { requireAsset } from '../../lib/assets.ts'
import type { ChainEvidence, WithdrawalOutcome } from '../chain/adapter.ts'
import { appendEvent } from '../events/writer.ts'
import { findQuote, markQuoteConsumed } from '../quotes/repo.ts'
import type { CreateWithdrawalInput, ListWithdrawalsInput, WithdrawalState, WithdrawalView } from './model.ts'
import * as repo from './repo.ts'
import { dispatchSoon } from './dispatch.ts'
import { decimalsOf, eventData, outgoingTransfer, toWithdrawalView } from './views.ts'

const OPEN_STATES: readonly WithdrawalState[] = ['approved', 'submitted']

/** Who approves or rejects. */
export type Actor = { type: 'key'; id: string } | { type: 'operator'; id: string } | { type: 'policy'; id: null }

/** Runs `work` after every earlier piece of work on the same withdrawal in this process. */
async function exclusively<T>(context: WithdrawalsContext, withdrawalId: string, work: () => Promise<T>): Promise<T> {
  const locks = context.state.locks
  const run = (locks.get(withdrawalId) ?? Promise.resolve()).then(work)
  const tail = run.catch(() => {})
  locks.set(withdrawalId, tail)
  try {
    return await run
  } finally {
    if (locks.get(withdrawalId) === tail) locks.delete(withdrawalId)
  }
}

/**
 * Executes a withdrawal quote to an active allowlist entry. The quote's total (amount + fees) moves
 * from available to inFlight in one commit with the quote consumed and the withdrawal written.
 * Above the organization's threshold it waits in pending_approval; otherwise it is approved at once
 * and broadcast in the background. A refusal changes nothing (the quote stays open).
 */
export async function createWithdrawal(context: WithdrawalsContext, principal: Principal, input: CreateWithdrawalInput): Promise<WithdrawalView> {
  const orgId = principal.orgId
  const state = context.state
  const account = await context.ledger.accounts.require(orgId, input.accountId, 'accountId')
  const entry = await context.requireActiveEntry(orgId, input.allowlistEntryId, 'allowlistEntryId')
  if (entry.accountId !== account.id) throw invalid('allowlistEntryId', `Allowlist entry ${entry.id} belongs to another account`)
  const quote = await findQuote(context.db, orgId, input.quoteId)
  if (!quote) throw new ApiError('not_found', 'No such quote', { field: 'quoteId' })
  if (quote.kind !== 'withdrawal') throw invalid('quoteId', `Quote ${quote.id} is a ${quote.kind} quote, not a withdrawal quote`)
  if (quote.accountId !== account.id) throw invalid('quoteId', `Quote ${quote.id} was made for another account`)
  const info = requireAsset(quote.asset, 'quoteId')
  if (info.network !== entry.network) throw invalid('allowlistEntryId', `The quote is for ${info.asset} on ${info.network}; allowlist entry ${entry.id} is on ${entry.network}`)
  assertQuoteOpen(context, quote)
  // Screening runs again at withdrawal time: an address blocked after registration cannot receive.
  await context.screening.screen({ orgId, accountId: account.id, network: entry.network, address: entry.address }, 'allowlistEntryId')
  const thresholdMinor = await context.approvalThresholdMinor(orgId, info.asset)

  // From here to `submit` everything is synchronous: no other request of this process slips in.
  assertCanSend(account, 'accountId')
  assertQuoteOpen(context, quote)
  if (state.claimedQuotes.has(quote.id)) throw new ApiError('quote_consumed', `Quote ${quote.id} was already executed`, { field: 'quoteId' })
  const now = context.clock.now(orgId)
  const approvalRequired = quote.amount > thresholdMinor
  const id = newId('wd')
  const base: repo.WithdrawalRow = {
    id,
    orgId,
    accountId: account.id,
    allowlistEntryId: entry.id,
    quoteId: quote.id,
    network: entry.network,
    asset: info.asset,
    address: entry.address,
    amount: quote.amount,
    networkFee: quote.networkFee,
    serviceFee: quote.serviceFee,
    totalDebited: quote.totalDebited,
    state: 'pending_approval',
    approvalRequired,
    createdByKeyId: principal.keyId,
    createdAt: now,
  }
  const row: repo.WithdrawalRow = approvalRequired ? base : approvedRow(context, base, { type: 'policy', id: null }, now)
  const postings: Posting[] = [
    { accountId: account.id, kind: 'customer', bucket: 'available', asset: info.asset, amountMinor: -quote.totalDebited },
    { accountId: account.id, kind: 'customer', bucket: 'in_flight', asset: info.asset, amountMinor: quote.totalDebited },
  ]
  const operation: LedgerOperation = {
    orgId,
    movementId: newId('mv'),
    movementKind: 'withdrawal_reserve',
    reference: id,
    createdAt: now,
    postings,
    guardedWrites: [
      {
        write: async (tx) => (await markQuoteConsumed(tx, orgId, quote.id, now)) !== undefined,
        refusal: () => new ApiError('quote_consumed', `Quote ${quote.id} was already executed`, { field: 'quoteId' }),
      },
      {
        write: async (tx) => {
          await repo.insertWithdrawal(tx, row)
          return true
        },
        refusal: () => new ApiError('conflict', 'The withdrawal could not be written'),
      },
    ],
    events: [eventRow(orgId, approvalRequired ? 'treasury.withdrawal.pending_approval' : 'treasury.withdrawal.approved', eventData(row, approvalEventExtra(row)), now)],
    reserve: () => state.claimedQuotes.add(quote.id),
    revert: () => state.claimedQuotes.delete(quote.id),
    // The database now says consumed; the claim in memory is no longer needed.
    committed: () => state.claimedQuotes.delete(quote.id),
    idempotencyRecord: answerInCommit(toWithdrawalView(row)),
  }
  // Throws insufficient_available synchronously, having changed nothing.
  await context.ledger.submit(operation)
  if (row.state === 'approved') dispatchSoon(context, row)
  return toWithdrawalView(row)
}

function assertQuoteOpen(context: WithdrawalsContext, quote: { id: string; state: string; expiresAt: Date; orgId: string }): void {
  if (quote.state === 'consumed') throw new ApiError('quote_consumed', `Quote ${quote.id} was already executed`, { field: 'quoteId' })
  if (context.clock.nowMs(quote.orgId) >= quote.expiresAt.getTime()) {
    throw new ApiError('quote_expired', `Quote ${quote.id} expired at ${quote.expiresAt.toISOString()}`, { field: 'quoteId' })
  }
}

function approvalEventExtra(row: repo.WithdrawalRow): Record<string, unknown> {
  if (row.state !== 'approved') return { totalDebited: formatAmount(row.totalDebited, decimalsOf(row.asset)) }
  return { approvedBy: { type: row.approvedByType, id: row.approvedBy ?? null }, unsignedTransactionDigest: row.unsignedTransaction?.digest ?? null }
}

/** The approved state of a withdrawal: who approved it, when, and the unsigned transaction to broadcast. */
function approvedRow(context: WithdrawalsContext, row: repo.WithdrawalRow, actor: Actor, now: Date): repo.WithdrawalRow {
  return {
    ...row,
    state: 'approved',
    approvedByType: actor.type,
    approvedBy: actor.id,
    approvedAt: now,
    unsignedTransaction: context.chain.buildUnsignedTransaction(outgoingTransfer(row)),
  }
}

async function requireWithdrawal(context: WithdrawalsContext, orgId: string, id: string): Promise<repo.WithdrawalRecord> {
  const row = await repo.findWithdrawal(context.db, orgId, id)
  if (!row) throw notFound('withdrawal')
  return row
}

function assertPendingApproval(row: repo.WithdrawalRecord): void {
  if (row.state !== 'pending_approval') throw new ApiError('conflict', `Withdrawal ${row.id} is ${row.state}, not pending_approval`)
}

/**
 * Every key of the holder that created the withdrawal: the creating key and the keys linked to it
 * by rotation (a rotated key's replacement is the same holder, not a second approver).
 */
async function creatorKeyLineage(context: WithdrawalsContext, orgId: string, creatorKeyId: string): Promise<Set<string>> {
  const links = await repo.keyLinks(context.db, orgId)
  const lineage = new Set([creatorKeyId])
  for (let grew = true; grew; ) {
    grew = false
    for (const key of links) {
      const linked = lineage.has(key.id) || (key.replacedByKeyId !== null && lineage.has(key.replacedByKeyId))
      if (!linked) continue
      for (const id of [key.id, key.replacedByKeyId]) {
        if (id !== null && !lineage.has(id)) {
          lineage.add(id)
          grew = true
        }
      }
    }
  }
  return lineage
}

/** A second secret key of the organization approves; the creating key (or its rotation) is refused with permission_denied. */
export async function approveByKey(context: WithdrawalsContext, principal: Principal, id: string): Promise<WithdrawalView> {
  const row = await requireWithdrawal(context, principal.orgId, id)
  const lineage = await creatorKeyLineage(context, principal.orgId, row.createdByKeyId)
  if (lineage.has(principal.keyId)) {
    throw new ApiError('permission_denied', 'The key that created this withdrawal cannot approve it; approve with a different secret key of the organization or through an operator')
  }
  return exclusively(context, id, async () => approve(context, await requireWithdrawal(context, principal.orgId, id), { type: 'key', id: principal.keyId }))
}

/**
 * Writes done in the same transaction as an operator's change (the operator audit trail), given the
 * withdrawal as changed and the time of the change; they commit exactly when the change does.
 */
export type AlongsideWrite = (tx: Executor, changed: repo.WithdrawalRecord, now: Date) => Promise<void>

export async function approveByOperator(context: WithdrawalsContext, orgId: string, id: string, operator: string, alongside?: AlongsideWrite): Promise<WithdrawalView> {
  return exclusively(context, id, async () => approve(context, await requireWithdrawal(context, orgId, id), { type: 'operator', id: operator }, alongside))
}

/** No money moves on approval: the state, the unsigned transaction and the event commit together. */
async function approve(context: WithdrawalsContext, row: repo.WithdrawalRecord, actor: Actor, alongside?: AlongsideWrite): Promise<WithdrawalView> {
  assertPendingApproval(row)
  const now = context.clock.now(row.orgId)
  const approved = approvedRow(context, row, actor, now)
  const updated = await context.db.transaction(async (tx) => {
    const changed = await repo.transition(tx, row.id, ['pending_approval'], {
      state: 'approved',
      approvedByType: approved.approvedByType,
      approvedBy: approved.approvedBy,
      approvedAt: now,
      unsignedTransaction: approved.unsignedTransaction,
    })
    if (changed) await appendEvent(tx, { orgId: row.orgId, type: 'treasury.withdrawal.approved', data: eventData(changed, approvalEventExtra(changed)), created: now })
    if (changed && alongside) await alongside(tx, changed, now)
    return changed
  })
  if (!updated) {
    const current = await requireWithdrawal(context, row.orgId, row.id)
    throw new ApiError('conflict', `Withdrawal ${row.id} is ${current.state}, not pending_approval`)
  }
  dispatchSoon(context, updated)
  return toWithdrawalView(updated)
}

export async function rejectByKey(context: WithdrawalsContext, principal: Principal, id: string, reason: string | undefined): Promise<WithdrawalView> {
  return exclusively(context, id, async () => reject(context, await requireWithdrawal(context, principal.orgId, id), { type: 'key', id: principal.keyId }, reason))
}

export async function rejectByOperator(
  context: WithdrawalsContext,
  orgId: string,
  id: string,
  operator: string,
  reason: string | undefined,
  alongside?: AlongsideWrite,
): Promise<WithdrawalView> {
  return exclusively(context, id, async () => reject(context, await requireWithdrawal(context, orgId, id), { type: 'operator', id: operator }, reason, alongside))
}

/** Rejecting a withdrawal that waits for approval returns its whole total to available. Any key of the organization may refuse. */
async function reject(context: WithdrawalsContext, row: repo.WithdrawalRecord, actor: Actor, reason: string | undefined, alongside?: AlongsideWrite): Promise<WithdrawalView> {
  assertPendingApproval(row)
  const now = context.clock.now(row.orgId)
  const rejected: repo.WithdrawalRow = {
    ...row,
    state: 'rejected',
    rejectedByType: actor.type === 'policy' ? null : actor.type,
    rejectedBy: actor.id,
    failureReason: reason ?? null,
    closedAt: now,
  }
  await close(context, row, rejected, ['pending_approval'], 'withdrawal_reject', returnPostings(row), 'treasury.withdrawal.rejected', {
    rejectedBy: { type: actor.type, id: actor.id },
    reason: reason ?? null,
  }, alongside)
  return toWithdrawalView(rejected)
}

function returnPostings(row: repo.WithdrawalRow): Posting[] {
  return [
    { accountId: row.accountId, kind: 'customer', bucket: 'in_flight', asset: row.asset, amountMinor: -row.totalDebited },
    { accountId: row.accountId, kind: 'customer', bucket: 'available', asset: row.asset, amountMinor: row.totalDebited },
  ]
}

/** Completed: inFlight leaves the account; the amount and network fee go to the chain, the service fee to the fees account. */
function completionPostings(row: repo.WithdrawalRow): Posting[] {
  const postings: Posting[] = [
    { accountId: row.accountId, kind: 'customer', bucket: 'in_flight', asset: row.asset, amountMinor: -row.totalDebited },
    { accountId: SYSTEM_ACCOUNTS.chainClearing, kind: 'system', bucket: 'available', asset: row.asset, amountMinor: row.amount + row.networkFee },
  ]
  if (row.serviceFee > 0n) postings.push({ accountId: SYSTEM_ACCOUNTS.fees, kind: 'system', bucket: 'available', asset: row.asset, amountMinor: row.serviceFee })
  return postings
}

/**
 * A terminal, money-moving transition: the postings, the withdrawal's new state (a conditional
 * update from `from`) and its event in one commit. Callers hold the withdrawal's lock and read its
 * state inside it, so this process never closes one twice; across instances the conditional update
 * refuses the loser with `conflict` and its reservation is undone.
 */
function close(
  context: WithdrawalsContext,
  row: repo.WithdrawalRecord,
  next: repo.WithdrawalRow,
  from: readonly WithdrawalState[],
  movementKind: string,
  postings: Posting[],
  eventType: string,
  eventExtra: Record<string, unknown>,
  alongside?: AlongsideWrite,
): Promise<void> {
  const now = next.closedAt!
  const { id: _id, orgId: _org, ...changes } = next
  const operation: LedgerOperation = {
    orgId: row.orgId,
    movementId: newId('mv'),
    movementKind,
    reference: row.id,
    createdAt: now,
    postings,
    guardedWrites: [
      {
        write: async (tx) => (await repo.transition(tx, row.id, from, changes)) !== undefined,
        refusal: () => new ApiError('conflict', `Withdrawal ${row.id} changed state meanwhile; it is no longer ${from.join(' or ')}`),
      },
      // Runs after the transition above succeeded in the same commit; it never refuses.
      ...(alongside ? [{ write: async (tx: Executor) => (await alongside(tx, { ...row, ...next } as repo.WithdrawalRecord, now), true), refusal: () => new ApiError('internal', 'An alongside write never refuses') }] : []),
    ],
    events: [eventRow(row.orgId, eventType, eventData(next, eventExtra), now)],
  }
  return context.ledger.submit(operation)
}

/**
 * Applies a chain outcome. Outcomes arrive at least once (again after a restart, possibly on two
 * instances), so this is idempotent: a withdrawal already terminal is left alone, work of this
 * process on it is awaited first, and a close that another instance won is not an error.
 */
export function applyOutcome(context: WithdrawalsContext, outcome: WithdrawalOutcome): Promise<void> {
  return exclusively(context, outcome.withdrawalId, () => applyOutcomeNow(context, outcome))
}

async function applyOutcomeNow(context: WithdrawalsContext, outcome: WithdrawalOutcome): Promise<void> {
  const row = await repo.findWithdrawal(context.db, outcome.orgId, outcome.withdrawalId)
  if (!row) {
    console.error(`withdrawals: a chain outcome names unknown withdrawal ${outcome.withdrawalId}; ignored`)
    return
  }
  if (!OPEN_STATES.includes(row.state)) return
  const now = context.clock.now(row.orgId)
  try {
    if (outcome.status === 'completed') {
      const evidence: ChainEvidence = outcome.evidence
      const confirmed: repo.WithdrawalRow = { ...row, state: 'confirmed', chainEvidence: evidence, txHash: row.txHash ?? evidence.txHash, closedAt: now }
      // The contract reserves treasury.withdrawal.confirmed and never emits it: this move is told by
      // treasury.withdrawal.completed instead.
      await close(context, row, confirmed, OPEN_STATES, 'withdrawal_complete', completionPostings(row), 'treasury.withdrawal.completed', {
        txHash: evidence.txHash,
        chainEvidence: evidence,
      })
    } else {
      const failed: repo.WithdrawalRow = { ...row, state: 'failed', failureReason: outcome.reason, closedAt: now }
      await close(context, row, failed, OPEN_STATES, 'withdrawal_fail', returnPostings(row), 'treasury.withdrawal.failed', { reason: outcome.reason })
    }
  } catch (error) {
    // Another close won (here or on another instance): the withdrawal is terminal, which is what the outcome asks.
    if (error instanceof ApiError && error.code === 'conflict') return
    throw error
  }
}

export async function getWithdrawal(context: WithdrawalsContext, orgId: string, id: string): Promise<WithdrawalView> {
  return toWithdrawalView(await requireWithdrawal(context, orgId, id))
}

export async function listWithdrawals(context: WithdrawalsContext, orgId: string, query: ListWithdrawalsInput): Promise<{ withdrawals: WithdrawalView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listWithdrawals(context.db, orgId, { accountId: query.accountId, state: query.state, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toWithdrawalView)
  return { withdrawals: page.items, hasMore: page.hasMore }
}
