import type { Executor } from '../../../db/client.ts'
import { assertCanSend } from '../../ledger/accounts.ts'
import { answerInCommit } from '../../platform/idempotency.ts'
import { eventRow } from '../events/write-sets.ts'
import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount } from '../../lib/money.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { Principal } from '../../platform/auth.ts'
import { DueSweep } from '../../platform/due-sweep.ts'
import type { Runtime } from '../../runtime.ts'
import { requireActiveEntry } from '../allowlist/service.ts'
import { findAsset, requireAsset } from '../../lib/assets.ts'
import type { ChainEvidence, OutgoingTransfer, WithdrawalOutcome } from '../chain/adapter.ts'
import { appendEvent } from '../events/writer.ts'
import { withdrawalApprovalThresholdMinor } from '../orgs/service.ts'
import { findQuote, markQuoteConsumed } from '../quotes/repo.ts'
import type { CreateWithdrawalInput, ListWithdrawalsInput, WithdrawalState, WithdrawalView } from './model.ts'
import * as repo from './repo.ts'

/**
 * Approved withdrawals not yet broadcast (after a restart, a failed broadcast, or another instance
 * that stopped before broadcasting) are looked for at least this often (see `DueSweep`)...
 */
const DISPATCH_SWEEP_BACKSTOP_MS = 2000
/** ...and a failed broadcast is tried again after this long. */
const DISPATCH_RETRY_MS = 1000
const DISPATCH_BATCH_MAX = 100
const OPEN_STATES: readonly WithdrawalState[] = ['approved', 'submitted']

/** Who approves or rejects. */
export type Actor = { type: 'key'; id: string } | { type: 'operator'; id: string } | { type: 'policy'; id: null }

interface WithdrawalsState {
  /** Quotes a withdrawal of this process is executing right now (decided, not yet committed). */
  claimedQuotes: Set<string>
  /**
   * Per withdrawal, the tail of the work this process does on it (approve, reject, apply an outcome):
   * each step reads the withdrawal only after the previous one finished, so it never acts on a state
   * that its predecessor has just changed.
   */
  locks: Map<string, Promise<unknown>>
  /** Withdrawals this process is broadcasting right now. */
  dispatching: Set<string>
}

const states = new WeakMap<Runtime, WithdrawalsState>()

function stateOf(runtime: Runtime): WithdrawalsState {
  let state = states.get(runtime)
  if (!state) {
    state = { claimedQuotes: new Set(), locks: new Map(), dispatching: new Set() }
    states.set(runtime, state)
  }
  return state
}

/** Runs `work` after every earlier piece of work on the same withdrawal in this process. */
async function exclusively<T>(runtime: Runtime, withdrawalId: string, work: () => Promise<T>): Promise<T> {
  const locks = stateOf(runtime).locks
  const run = (locks.get(withdrawalId) ?? Promise.resolve()).then(work)
  const tail = run.catch(() => {})
  locks.set(withdrawalId, tail)
  try {
    return await run
  } finally {
    if (locks.get(withdrawalId) === tail) locks.delete(withdrawalId)
  }
}

function decimalsOf(asset: string): number {
  return findAsset(asset)?.decimals ?? 0
}

export function toWithdrawalView(row: repo.WithdrawalRow): WithdrawalView {
  const format = (value: bigint) => formatAmount(value, decimalsOf(row.asset))
  return {
    id: row.id,
    accountId: row.accountId,
    allowlistEntryId: row.allowlistEntryId,
    quoteId: row.quoteId,
    network: row.network,
    asset: row.asset,
    address: row.address,
    amount: format(row.amount),
    fees: { network: format(row.networkFee), service: format(row.serviceFee) },
    totalDebited: format(row.totalDebited),
    state: row.state,
    approval: {
      required: row.approvalRequired,
      approvedBy: row.approvedByType ? { type: row.approvedByType, id: row.approvedBy ?? null } : null,
      approvedAt: row.approvedAt?.toISOString() ?? null,
    },
    rejectedBy: row.rejectedByType ? { type: row.rejectedByType, id: row.rejectedBy ?? null } : null,
    unsignedTransaction: (row.unsignedTransaction ?? null) as WithdrawalView['unsignedTransaction'],
    txHash: row.txHash ?? null,
    chainEvidence: row.chainEvidence ?? null,
    failureReason: row.failureReason ?? null,
    createdAt: row.createdAt.toISOString(),
    submittedAt: row.submittedAt?.toISOString() ?? null,
    closedAt: row.closedAt?.toISOString() ?? null,
  }
}

/** The data of every `treasury.withdrawal.*` event: the contract's id, accountId, amount, address, plus asset and network. */
function eventData(row: repo.WithdrawalRow, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { id: row.id, accountId: row.accountId, amount: formatAmount(row.amount, decimalsOf(row.asset)), address: row.address, asset: row.asset, network: row.network, ...extra }
}

function outgoingTransfer(row: repo.WithdrawalRow): OutgoingTransfer {
  return { withdrawalId: row.id, orgId: row.orgId, network: row.network, asset: row.asset, toAddress: row.address, amountMinor: row.amount }
}

/**
 * Executes a withdrawal quote to an active allowlist entry. The quote's total (amount + fees) moves
 * from available to inFlight in one commit with the quote consumed and the withdrawal written.
 * Above the organization's threshold it waits in pending_approval; otherwise it is approved at once
 * and broadcast in the background. A refusal changes nothing (the quote stays open).
 */
export async function createWithdrawal(runtime: Runtime, principal: Principal, input: CreateWithdrawalInput): Promise<WithdrawalView> {
  const orgId = principal.orgId
  const state = stateOf(runtime)
  const account = await runtime.ledger.accounts.require(orgId, input.accountId, 'accountId')
  const entry = await requireActiveEntry(runtime, orgId, input.allowlistEntryId, 'allowlistEntryId')
  if (entry.accountId !== account.id) throw invalid('allowlistEntryId', `Allowlist entry ${entry.id} belongs to another account`)
  const quote = await findQuote(runtime.db, orgId, input.quoteId)
  if (!quote) throw new ApiError('not_found', 'No such quote', { field: 'quoteId' })
  if (quote.kind !== 'withdrawal') throw invalid('quoteId', `Quote ${quote.id} is a ${quote.kind} quote, not a withdrawal quote`)
  if (quote.accountId !== account.id) throw invalid('quoteId', `Quote ${quote.id} was made for another account`)
  const info = requireAsset(quote.asset, 'quoteId')
  if (info.network !== entry.network) throw invalid('allowlistEntryId', `The quote is for ${info.asset} on ${info.network}; allowlist entry ${entry.id} is on ${entry.network}`)
  assertQuoteOpen(runtime, quote)
  // Screening runs again at withdrawal time: an address blocked after registration cannot receive.
  await runtime.screening.screen({ orgId, accountId: account.id, network: entry.network, address: entry.address }, 'allowlistEntryId')
  const thresholdMinor = await withdrawalApprovalThresholdMinor(runtime, orgId, info.asset)

  // From here to `submit` everything is synchronous: no other request of this process slips in.
  assertCanSend(account, 'accountId')
  assertQuoteOpen(runtime, quote)
  if (state.claimedQuotes.has(quote.id)) throw new ApiError('quote_consumed', `Quote ${quote.id} was already executed`, { field: 'quoteId' })
  const now = runtime.clock.now(orgId)
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
  const row: repo.WithdrawalRow = approvalRequired ? base : approvedRow(runtime, base, { type: 'policy', id: null }, now)
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
  await runtime.ledger.submit(operation)
  if (row.state === 'approved') dispatchSoon(runtime, row)
  return toWithdrawalView(row)
}

function assertQuoteOpen(runtime: Runtime, quote: { id: string; state: string; expiresAt: Date; orgId: string }): void {
  if (quote.state === 'consumed') throw new ApiError('quote_consumed', `Quote ${quote.id} was already executed`, { field: 'quoteId' })
  if (runtime.clock.nowMs(quote.orgId) >= quote.expiresAt.getTime()) {
    throw new ApiError('quote_expired', `Quote ${quote.id} expired at ${quote.expiresAt.toISOString()}`, { field: 'quoteId' })
  }
}

function approvalEventExtra(row: repo.WithdrawalRow): Record<string, unknown> {
  if (row.state !== 'approved') return { totalDebited: formatAmount(row.totalDebited, decimalsOf(row.asset)) }
  return { approvedBy: { type: row.approvedByType, id: row.approvedBy ?? null }, unsignedTransactionDigest: row.unsignedTransaction?.digest ?? null }
}

/** The approved state of a withdrawal: who approved it, when, and the unsigned transaction to broadcast. */
function approvedRow(runtime: Runtime, row: repo.WithdrawalRow, actor: Actor, now: Date): repo.WithdrawalRow {
  return {
    ...row,
    state: 'approved',
    approvedByType: actor.type,
    approvedBy: actor.id,
    approvedAt: now,
    unsignedTransaction: runtime.chain.buildUnsignedTransaction(outgoingTransfer(row)),
  }
}

async function requireWithdrawal(runtime: Runtime, orgId: string, id: string): Promise<repo.WithdrawalRecord> {
  const row = await repo.findWithdrawal(runtime.db, orgId, id)
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
async function creatorKeyLineage(runtime: Runtime, orgId: string, creatorKeyId: string): Promise<Set<string>> {
  const links = await repo.keyLinks(runtime.db, orgId)
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
export async function approveByKey(runtime: Runtime, principal: Principal, id: string): Promise<WithdrawalView> {
  const row = await requireWithdrawal(runtime, principal.orgId, id)
  const lineage = await creatorKeyLineage(runtime, principal.orgId, row.createdByKeyId)
  if (lineage.has(principal.keyId)) {
    throw new ApiError('permission_denied', 'The key that created this withdrawal cannot approve it; approve with a different secret key of the organization or through an operator')
  }
  return exclusively(runtime, id, async () => approve(runtime, await requireWithdrawal(runtime, principal.orgId, id), { type: 'key', id: principal.keyId }))
}

/**
 * Writes done in the same transaction as an operator's change (the operator audit trail), given the
 * withdrawal as changed and the time of the change; they commit exactly when the change does.
 */
export type AlongsideWrite = (tx: Executor, changed: repo.WithdrawalRecord, now: Date) => Promise<void>

export async function approveByOperator(runtime: Runtime, orgId: string, id: string, operator: string, alongside?: AlongsideWrite): Promise<WithdrawalView> {
  return exclusively(runtime, id, async () => approve(runtime, await requireWithdrawal(runtime, orgId, id), { type: 'operator', id: operator }, alongside))
}

/** No money moves on approval: the state, the unsigned transaction and the event commit together. */
async function approve(runtime: Runtime, row: repo.WithdrawalRecord, actor: Actor, alongside?: AlongsideWrite): Promise<WithdrawalView> {
  assertPendingApproval(row)
  const now = runtime.clock.now(row.orgId)
  const approved = approvedRow(runtime, row, actor, now)
  const updated = await runtime.db.transaction(async (tx) => {
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
    const current = await requireWithdrawal(runtime, row.orgId, row.id)
    throw new ApiError('conflict', `Withdrawal ${row.id} is ${current.state}, not pending_approval`)
  }
  dispatchSoon(runtime, updated)
  return toWithdrawalView(updated)
}

export async function rejectByKey(runtime: Runtime, principal: Principal, id: string, reason: string | undefined): Promise<WithdrawalView> {
  return exclusively(runtime, id, async () => reject(runtime, await requireWithdrawal(runtime, principal.orgId, id), { type: 'key', id: principal.keyId }, reason))
}

export async function rejectByOperator(
  runtime: Runtime,
  orgId: string,
  id: string,
  operator: string,
  reason: string | undefined,
  alongside?: AlongsideWrite,
): Promise<WithdrawalView> {
  return exclusively(runtime, id, async () => reject(runtime, await requireWithdrawal(runtime, orgId, id), { type: 'operator', id: operator }, reason, alongside))
}

/** Rejecting a withdrawal that waits for approval returns its whole total to available. Any key of the organization may refuse. */
async function reject(runtime: Runtime, row: repo.WithdrawalRecord, actor: Actor, reason: string | undefined, alongside?: AlongsideWrite): Promise<WithdrawalView> {
  assertPendingApproval(row)
  const now = runtime.clock.now(row.orgId)
  const rejected: repo.WithdrawalRow = {
    ...row,
    state: 'rejected',
    rejectedByType: actor.type === 'policy' ? null : actor.type,
    rejectedBy: actor.id,
    failureReason: reason ?? null,
    closedAt: now,
  }
  await close(runtime, row, rejected, ['pending_approval'], 'withdrawal_reject', returnPostings(row), 'treasury.withdrawal.rejected', {
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
  runtime: Runtime,
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
  return runtime.ledger.submit(operation)
}

/**
 * Applies a chain outcome. Outcomes arrive at least once (again after a restart, possibly on two
 * instances), so this is idempotent: a withdrawal already terminal is left alone, work of this
 * process on it is awaited first, and a close that another instance won is not an error.
 */
export function applyOutcome(runtime: Runtime, outcome: WithdrawalOutcome): Promise<void> {
  return exclusively(runtime, outcome.withdrawalId, () => applyOutcomeNow(runtime, outcome))
}

async function applyOutcomeNow(runtime: Runtime, outcome: WithdrawalOutcome): Promise<void> {
  const row = await repo.findWithdrawal(runtime.db, outcome.orgId, outcome.withdrawalId)
  if (!row) {
    console.error(`withdrawals: a chain outcome names unknown withdrawal ${outcome.withdrawalId}; ignored`)
    return
  }
  if (!OPEN_STATES.includes(row.state)) return
  const now = runtime.clock.now(row.orgId)
  try {
    if (outcome.status === 'completed') {
      const evidence: ChainEvidence = outcome.evidence
      const confirmed: repo.WithdrawalRow = { ...row, state: 'confirmed', chainEvidence: evidence, txHash: row.txHash ?? evidence.txHash, closedAt: now }
      // The contract reserves treasury.withdrawal.confirmed and never emits it: this move is told by
      // treasury.withdrawal.completed instead.
      await close(runtime, row, confirmed, OPEN_STATES, 'withdrawal_complete', completionPostings(row), 'treasury.withdrawal.completed', {
        txHash: evidence.txHash,
        chainEvidence: evidence,
      })
    } else {
      const failed: repo.WithdrawalRow = { ...row, state: 'failed', failureReason: outcome.reason, closedAt: now }
      await close(runtime, row, failed, OPEN_STATES, 'withdrawal_fail', returnPostings(row), 'treasury.withdrawal.failed', { reason: outcome.reason })
    }
  } catch (error) {
    // Another close won (here or on another instance): the withdrawal is terminal, which is what the outcome asks.
    if (error instanceof ApiError && error.code === 'conflict') return
    throw error
  }
}

/** Broadcasts an approved withdrawal, outside any transaction; the adapter is idempotent on the withdrawal id. */
async function dispatch(runtime: Runtime, row: repo.WithdrawalRecord): Promise<void> {
  const state = stateOf(runtime)
  if (state.dispatching.has(row.id)) return
  state.dispatching.add(row.id)
  try {
    const { txHash } = await runtime.chain.submitWithdrawal(outgoingTransfer(row))
    const now = runtime.clock.now(row.orgId)
    await runtime.db.transaction(async (tx) => {
      const submitted = await repo.transition(tx, row.id, ['approved'], { state: 'submitted', txHash, submittedAt: now })
      if (submitted) await appendEvent(tx, { orgId: row.orgId, type: 'treasury.withdrawal.submitted', data: eventData(submitted, { txHash }), created: now })
    })
  } finally {
    state.dispatching.delete(row.id)
  }
}

const sweeps = new WeakMap<Runtime, DueSweep>()

function dispatchSoon(runtime: Runtime, row: repo.WithdrawalRecord | repo.WithdrawalRow): void {
  void dispatch(runtime, row as repo.WithdrawalRecord).catch((error: unknown) => {
    console.error(`withdrawals: broadcasting ${row.id} failed; the sweep retries`, error)
    sweeps.get(runtime)?.wake(runtime.clock.wallNowMs() + DISPATCH_RETRY_MS)
  })
}

/**
 * Broadcasts every approved withdrawal not yet submitted (after a restart, or when a broadcast
 * failed). Answers when to look again: after the retry delay if a broadcast failed or more are
 * waiting than one pass takes, otherwise undefined (the sweep's backstop).
 */
export async function dispatchApproved(runtime: Runtime): Promise<number | undefined> {
  const rows = await repo.approvedWithdrawals(runtime.db, DISPATCH_BATCH_MAX)
  const outcomes = await Promise.allSettled(rows.map((row) => dispatch(runtime, row)))
  let failed = false
  for (const outcome of outcomes) {
    if (outcome.status === 'rejected') {
      failed = true
      console.error('withdrawals: a broadcast failed; the next sweep retries', outcome.reason)
    }
  }
  return failed || rows.length === DISPATCH_BATCH_MAX ? runtime.clock.wallNowMs() + DISPATCH_RETRY_MS : undefined
}

/** Listens to chain outcomes and runs the broadcast sweep until the runtime stops. */
export function startWithdrawals(runtime: Runtime): void {
  runtime.chain.onWithdrawalOutcome((outcome) => applyOutcome(runtime, outcome))
  const sweep = new DueSweep(
    { name: 'withdrawals', backstopMs: DISPATCH_SWEEP_BACKSTOP_MS, minGapMs: DISPATCH_RETRY_MS, wallNowMs: () => runtime.clock.wallNowMs() },
    () => dispatchApproved(runtime),
  )
  sweeps.set(runtime, sweep)
  sweep.start()
  runtime.stoppers.push(async () => {
    await sweep.stop()
    await Promise.allSettled([...stateOf(runtime).locks.values()])
  })
}

export async function getWithdrawal(runtime: Runtime, orgId: string, id: string): Promise<WithdrawalView> {
  return toWithdrawalView(await requireWithdrawal(runtime, orgId, id))
}

export async function listWithdrawals(runtime: Runtime, orgId: string, query: ListWithdrawalsInput): Promise<{ withdrawals: WithdrawalView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listWithdrawals(runtime.db, orgId, { accountId: query.accountId, state: query.state, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toWithdrawalView)
  return { withdrawals: page.items, hasMore: page.hasMore }
}
