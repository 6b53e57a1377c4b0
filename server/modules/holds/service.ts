import { assertCanSend } from '../../ledger/accounts.ts'
import { eventRow } from '../events/write-sets.ts'
import type { Posting } from '../../ledger/hot-balances.ts'
import { newPendingHold, type Ledger, type PendingHold } from '../../ledger/ledger.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import type { HoldRow } from './write-sets.ts'
import { notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { findAsset, requireAsset } from '../../lib/assets.ts'
import type { Clock } from '../clock/clock.ts'
import { assertWithinLimits } from '../transfers/fees.ts'
import type { TransferExecutor } from '../transfers/service.ts'
import type { CaptureHoldInput, CreateHoldInput, HoldView } from './model.ts'
import type { HoldRecord } from './repo.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'
import { holdRowsToWrite, releasePostings, type HoldRecords } from './state.ts'

/** What the holds' rules read and move: the ledger, the organizations' clocks, the holds' records, and transfers (a capture is one). */
export interface HoldsDeps {
  ledger: Ledger
  clock: Clock
  records: HoldRecords
  transfers: TransferExecutor
}

export function toHoldView(row: HoldRow): HoldView {
  const decimals = findAsset(row.asset)?.decimals ?? 0
  return {
    id: row.id,
    accountId: row.accountId,
    asset: row.asset,
    amount: formatAmount(row.amount, decimals),
    state: row.state,
    expiresAt: row.expiresAt.toISOString(),
    capturedAmount: row.capturedAmount == null ? null : formatAmount(row.capturedAmount, decimals),
    transferId: row.transferId ?? null,
    createdAt: (row.createdAt ?? new Date(0)).toISOString(),
    closedAt: row.closedAt ? row.closedAt.toISOString() : null,
  }
}

/** The row a hold writes in a given state; holds and the payments that own holds both build it here. */
export function holdRow(hold: PendingHold, state: HoldRow['state'], closedAt: Date | null): HoldRow {
  return {
    id: hold.id,
    orgId: hold.orgId,
    accountId: hold.accountId,
    asset: hold.asset,
    amount: hold.amountMinor,
    state,
    expiresAt: new Date(hold.expiresAtMs),
    capturedAmount: null,
    transferId: null,
    createdAt: new Date(hold.createdAtMs),
    closedAt,
  }
}

function holdEventData(hold: PendingHold): Record<string, unknown> {
  return {
    holdId: hold.id,
    accountId: hold.accountId,
    asset: hold.asset,
    amount: formatAmount(hold.amountMinor, requireAsset(hold.asset).decimals),
    expiresAt: new Date(hold.expiresAtMs).toISOString(),
  }
}

/** Reserves `amount` of the account's available into held until capture, release or expiry. */
export async function createHold(deps: Pick<HoldsDeps, 'ledger' | 'clock'>, orgId: string, input: CreateHoldInput): Promise<HoldView> {
  const info = requireAsset(input.asset)
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  assertWithinLimits(amountMinor, deps.ledger.policy(info.asset), info.decimals)
  const account = await deps.ledger.accounts.require(orgId, input.accountId, 'accountId')
  assertCanSend(account, 'accountId')
  const now = deps.clock.now(orgId)
  const hold = newPendingHold({
    id: newId('hold'),
    orgId,
    accountId: account.id,
    asset: info.asset,
    amountMinor,
    expiresAtMs: now.getTime() + input.expiresInSeconds * 1000,
    createdAtMs: now.getTime(),
  })
  const row = holdRow(hold, 'pending', null)
  const postings: Posting[] = [
    { accountId: account.id, kind: 'customer', bucket: 'available', asset: info.asset, amountMinor: -amountMinor },
    { accountId: account.id, kind: 'customer', bucket: 'held', asset: info.asset, amountMinor },
  ]
  await deps.ledger.submit({
    orgId,
    movementId: newId('mv'),
    movementKind: 'hold_reserve',
    reference: hold.id,
    createdAt: now,
    postings,
    holds: [row],
    events: [eventRow(orgId, 'hold.created', { ...holdEventData(hold), externalId: account.externalId }, now)],
    // The hold is pending (and capturable) from the moment its reservation is made.
    reserve: () => deps.ledger.holds.open(hold),
    revert: () => deps.ledger.holds.close(hold.id),
    idempotencyRecord: answerInCommit(toHoldView(row)),
  })
  return toHoldView(row)
}

/** Pays from the hold to a destination; what the capture does not use returns to available. */
export async function captureHold(deps: HoldsDeps, orgId: string, holdId: string, input: CaptureHoldInput): Promise<HoldView> {
  await deps.records.requirePending(orgId, holdId)
  const hold = deps.ledger.holds.get(holdId)
  // It closed while the lookup awaited; looking again answers why.
  if (!hold) return captureHold(deps, orgId, holdId, input)
  const info = requireAsset(hold.asset)
  const amountMinor = input.amount === undefined ? hold.amountMinor : parseAmount(input.amount, info.decimals, 'amount')
  const transfer = await deps.transfers.execute(orgId, {
    sourceAccountId: hold.accountId,
    destinationAccountId: input.destinationAccountId,
    info,
    amountMinor,
    feeModel: input.feeModel ?? 'inclusive',
    holdId,
    description: input.description,
    fields: { amount: 'amount', holdId: 'id' },
    answer: (made) => capturedView(hold, made),
  })
  return capturedView(hold, transfer)
}

function capturedView(hold: PendingHold, transfer: { createdAt: Date; totalDebited: bigint; id: string }): HoldView {
  return toHoldView({ ...holdRow(hold, 'captured', transfer.createdAt), capturedAmount: transfer.totalDebited, transferId: transfer.id })
}

/** The commit that returns the whole hold to available, by request (`released`) or by the clock (`expired`). */
export function closingOperation(deps: Pick<HoldsDeps, 'ledger' | 'clock'>, hold: PendingHold, state: 'released' | 'expired'): { operation: LedgerOperation; row: HoldRow; now: Date } {
  const now = deps.clock.now(hold.orgId)
  const row = holdRow(hold, state, now)
  const operation: LedgerOperation = {
    orgId: hold.orgId,
    movementId: newId('mv'),
    movementKind: state === 'released' ? 'hold_release' : 'hold_expiry',
    reference: hold.id,
    createdAt: now,
    postings: releasePostings(hold),
    holds: holdRowsToWrite(hold, row),
    events: [eventRow(hold.orgId, `hold.${state}`, holdEventData(hold), now)],
    ...deps.ledger.holds.closing(hold, state === 'expired'),
  }
  return { operation, row, now }
}

export async function releaseHold(deps: HoldsDeps, orgId: string, holdId: string): Promise<HoldView> {
  await deps.records.requirePending(orgId, holdId)
  const hold = deps.records.take(orgId, holdId)
  const { operation, row } = closingOperation(deps, hold, 'released')
  operation.idempotencyRecord = answerInCommit(toHoldView(row))
  await deps.ledger.submit(operation)
  return toHoldView(row)
}

export async function getHold(deps: Pick<HoldsDeps, 'records'>, orgId: string, holdId: string): Promise<HoldView> {
  const row: HoldRecord | undefined = await deps.records.find(orgId, holdId)
  if (!row) throw notFound('hold')
  return toHoldView(row)
}
