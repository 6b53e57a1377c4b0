import { eventRow } from '../events/write-sets.ts'
import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import { assertCanSend } from '../../ledger/accounts.ts'
import type { Ledger, PendingHold } from '../../ledger/ledger.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import type { HoldRow } from '../holds/write-sets.ts'
import type { TransferRow } from './write-sets.ts'
import { invalid, notFound } from '../../lib/errors.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Database } from '../../../db/client.ts'
import { findAsset, requireAsset, type AssetInfo } from '../../lib/assets.ts'
import type { Clock } from '../clock/clock.ts'
import type { HoldRecords } from '../holds/state.ts'
import { planTransfer, type FeeModel, type TransferPlan } from './fees.ts'
import type { CreateTransferInput, TransferView } from './model.ts'
import * as repo from './repo.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'

/** What transfers read and move: the ledger, the organizations' clocks, the database, and the holds a transfer may be paid from. */
export interface TransfersDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  holds: HoldRecords
}

/** A transfer as another module makes one (a hold's capture). */
export interface TransferExecutor {
  execute(orgId: string, request: TransferRequest): Promise<repo.TransferRecord>
}

export function toTransferView(row: repo.TransferRecord): TransferView {
  const decimals = findAsset(row.asset)?.decimals ?? 0
  const format = (value: bigint) => formatAmount(value, decimals)
  return {
    id: row.id,
    state: row.state,
    sourceAccountId: row.sourceAccountId,
    destinationAccountId: row.destinationAccountId,
    asset: row.asset,
    amount: format(row.amount),
    feeModel: row.feeModel,
    fee: format(row.fee),
    netAmount: format(row.netAmount),
    totalDebited: format(row.totalDebited),
    holdId: row.holdId,
    description: row.description,
    createdAt: row.createdAt.toISOString(),
  }
}

/** Where a transfer's money comes from: the source's available, or one of its pending holds. */
type Funding = { kind: 'available' } | { kind: 'hold'; hold: PendingHold }

function fundingPostings(sourceId: string, asset: string, plan: TransferPlan, funding: Funding): Posting[] {
  if (funding.kind === 'available') return [{ accountId: sourceId, kind: 'customer', bucket: 'available', asset, amountMinor: -plan.totalDebitedMinor }]
  // All of the hold leaves `held`; what the transfer does not use returns to available in the same movement.
  const remainder = funding.hold.amountMinor - plan.totalDebitedMinor
  const postings: Posting[] = [{ accountId: sourceId, kind: 'customer', bucket: 'held', asset, amountMinor: -funding.hold.amountMinor }]
  if (remainder > 0n) postings.push({ accountId: sourceId, kind: 'customer', bucket: 'available', asset, amountMinor: remainder })
  return postings
}

function transferPostings(sourceId: string, destinationId: string, asset: string, plan: TransferPlan, funding: Funding): Posting[] {
  const postings = fundingPostings(sourceId, asset, plan, funding)
  postings.push({ accountId: destinationId, kind: 'customer', bucket: 'available', asset, amountMinor: plan.netAmountMinor })
  if (plan.feeMinor > 0n) postings.push({ accountId: SYSTEM_ACCOUNTS.fees, kind: 'system', bucket: 'available', asset, amountMinor: plan.feeMinor })
  return postings
}

export interface TransferRequest {
  sourceAccountId: string
  destinationAccountId: string
  info: AssetInfo
  amountMinor: bigint
  feeModel: FeeModel
  holdId: string | undefined
  description: string | undefined
  /** Request field names, so errors point at what the caller sent (capture names differ). */
  fields: { amount: string; holdId: string }
  /** The request's answer made from the transfer (a hold's capture answers the hold), committed with its key: `answerInCommit`. */
  answer?: (transfer: repo.TransferRecord) => unknown
}

/**
 * Validates, decides and commits a transfer. Everything asynchronous (account lookups) happens
 * first; from the hold check to `submit` the code is synchronous, so no other request can slip in
 * between the decision and the reservation.
 */
export async function executeTransfer(deps: TransfersDeps, orgId: string, request: TransferRequest): Promise<repo.TransferRecord> {
  const { info } = request
  const plan = planTransfer(request.amountMinor, request.feeModel, deps.ledger.policy(info.asset), info.decimals)
  if (request.sourceAccountId === request.destinationAccountId) throw invalid('destinationAccountId', 'The destination must differ from the source')
  const source = await deps.ledger.accounts.require(orgId, request.sourceAccountId, 'sourceAccountId')
  const destination = await deps.ledger.accounts.require(orgId, request.destinationAccountId, 'destinationAccountId')
  if (request.holdId !== undefined) await deps.holds.requirePending(orgId, request.holdId, request.fields.holdId)
  assertCanSend(source, 'sourceAccountId')
  const funding: Funding = request.holdId === undefined ? { kind: 'available' } : { kind: 'hold', hold: deps.holds.take(orgId, request.holdId, request.fields.holdId) }
  if (funding.kind === 'hold') assertHoldCovers(funding.hold, source.id, info, plan, request.fields.amount)
  const now = deps.clock.now(orgId)
  const id = newId('tr')
  const movementId = newId('mv')
  const row: TransferRow = {
    id,
    orgId,
    sourceAccountId: source.id,
    destinationAccountId: destination.id,
    asset: info.asset,
    amount: plan.amountMinor,
    fee: plan.feeMinor,
    feeModel: request.feeModel,
    netAmount: plan.netAmountMinor,
    totalDebited: plan.totalDebitedMinor,
    holdId: request.holdId ?? null,
    description: request.description ?? null,
    state: 'completed',
    movementId,
    createdAt: now,
  }
  const record = row as repo.TransferRecord
  const view = toTransferView(record)
  const operation: LedgerOperation = {
    orgId,
    movementId,
    movementKind: funding.kind === 'hold' ? 'hold_capture' : 'transfer',
    reference: id,
    createdAt: now,
    postings: transferPostings(source.id, destination.id, info.asset, plan, funding),
    transfers: [row],
    events: [
      eventRow(orgId, 'transfer.completed', { ...view, sourceExternalId: source.externalId, destinationExternalId: destination.externalId }, now),
    ],
  }
  if (funding.kind === 'hold') attachCapture(deps.ledger, operation, funding.hold, record, now)
  operation.idempotencyRecord = answerInCommit(request.answer ? request.answer(record) : view)
  await deps.ledger.submit(operation)
  return record
}

function assertHoldCovers(hold: PendingHold, sourceId: string, info: AssetInfo, plan: TransferPlan, amountField: string): void {
  if (hold.accountId !== sourceId) throw invalid('sourceAccountId', `Hold ${hold.id} belongs to another account`)
  if (hold.asset !== info.asset) throw invalid('asset', `Hold ${hold.id} is in ${hold.asset}`)
  if (plan.totalDebitedMinor > hold.amountMinor) {
    throw invalid(amountField, `The capture debits ${formatAmount(plan.totalDebitedMinor, info.decimals)}, more than the ${formatAmount(hold.amountMinor, info.decimals)} held`)
  }
}

/** Capturing writes the hold's final state and its event in the same commit as the transfer. */
function attachCapture(ledger: Ledger, operation: LedgerOperation, hold: PendingHold, transfer: repo.TransferRecord, now: Date): void {
  const decimals = requireAsset(hold.asset).decimals
  const captured: HoldRow = {
    id: hold.id,
    orgId: hold.orgId,
    accountId: hold.accountId,
    asset: hold.asset,
    amount: hold.amountMinor,
    state: 'captured',
    expiresAt: new Date(hold.expiresAtMs),
    capturedAmount: transfer.totalDebited,
    transferId: transfer.id,
    createdAt: new Date(hold.createdAtMs),
    closedAt: now,
  }
  operation.holds = [captured]
  operation.events!.push(
    eventRow(
      hold.orgId,
      'hold.captured',
      {
        holdId: hold.id,
        accountId: hold.accountId,
        asset: hold.asset,
        amount: formatAmount(hold.amountMinor, decimals),
        capturedAmount: formatAmount(transfer.totalDebited, decimals),
        releasedAmount: formatAmount(hold.amountMinor - transfer.totalDebited, decimals),
        transferId: transfer.id,
      },
      now,
    ),
  )
  Object.assign(operation, ledger.holds.closing(hold))
}

export async function createTransfer(deps: TransfersDeps, orgId: string, input: CreateTransferInput): Promise<TransferView> {
  const info = requireAsset(input.asset)
  const record = await executeTransfer(deps, orgId, {
    sourceAccountId: input.sourceAccountId,
    destinationAccountId: input.destinationAccountId,
    info,
    amountMinor: parseAmount(input.amount, info.decimals, 'amount'),
    feeModel: input.feeModel ?? 'inclusive',
    holdId: input.holdId,
    description: input.description,
    fields: { amount: 'amount', holdId: 'holdId' },
  })
  return toTransferView(record)
}

export async function getTransfer(deps: TransfersDeps, orgId: string, id: string): Promise<TransferView> {
  const row = await repo.findTransfer(deps.db, orgId, id)
  if (!row) throw notFound('transfer')
  return toTransferView(row)
}

export async function listTransfers(
  deps: TransfersDeps,
  orgId: string,
  query: { accountId?: string; after?: string; limit?: number },
): Promise<{ transfers: TransferView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listTransfers(deps.db, orgId, { accountId: query.accountId, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toTransferView)
  return { transfers: page.items, hasMore: page.hasMore }
}
