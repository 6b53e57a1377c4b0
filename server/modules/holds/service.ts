import { assertCanSend } from '../../ledger/accounts.ts'
import { eventRow } from '../../ledger/events.ts'
import type { Posting } from '../../ledger/hot-balances.ts'
import { newPendingHold, type PendingHold } from '../../ledger/ledger.ts'
import type { HoldRow, LedgerOperation } from '../../ledger/writer.ts'
import { notFound } from '../../lib/errors.ts'
import { logFailure } from '../../lib/log.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Runtime } from '../../runtime.ts'
import { findAsset, requireAsset } from '../../lib/assets.ts'
import { assertWithinLimits } from '../transfers/fees.ts'
import { executeTransfer } from '../transfers/service.ts'
import type { CaptureHoldInput, CreateHoldInput, HoldView } from './model.ts'
import type { HoldRecord } from './repo.ts'
import { answerInCommit } from '../../platform/idempotency.ts'
import { closingHooks, findHoldRecord, holdRowsToWrite, releasePostings, requirePendingHold, takePendingHold } from './state.ts'

/** How often the expiry sweep looks for holds past their expiry on their organization's clock. */
const EXPIRY_SWEEP_INTERVAL_MS = 250
/** One sweep closes at most this many holds; the next sweep takes the rest. */
const EXPIRY_SWEEP_BATCH_MAX = 1000

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
export async function createHold(runtime: Runtime, orgId: string, input: CreateHoldInput): Promise<HoldView> {
  const info = requireAsset(input.asset)
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  assertWithinLimits(amountMinor, runtime.ledger.policy(info.asset), info.decimals)
  const account = await runtime.ledger.accounts.require(orgId, input.accountId, 'accountId')
  assertCanSend(account, 'accountId')
  const now = runtime.clock.now(orgId)
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
  await runtime.ledger.submit({
    orgId,
    movementId: newId('mv'),
    movementKind: 'hold_reserve',
    reference: hold.id,
    createdAt: now,
    postings,
    holds: [row],
    events: [eventRow(orgId, 'hold.created', { ...holdEventData(hold), externalId: account.externalId }, now)],
    // The hold is pending (and capturable) from the moment its reservation is made.
    reserve: () => runtime.ledger.holds.open(hold),
    revert: () => runtime.ledger.holds.close(hold.id),
    idempotencyRecord: answerInCommit(toHoldView(row)),
  })
  return toHoldView(row)
}

/** Pays from the hold to a destination; what the capture does not use returns to available. */
export async function captureHold(runtime: Runtime, orgId: string, holdId: string, input: CaptureHoldInput): Promise<HoldView> {
  await requirePendingHold(runtime, orgId, holdId)
  const hold = runtime.ledger.holds.get(holdId)
  // It closed while the lookup awaited; looking again answers why.
  if (!hold) return captureHold(runtime, orgId, holdId, input)
  const info = requireAsset(hold.asset)
  const amountMinor = input.amount === undefined ? hold.amountMinor : parseAmount(input.amount, info.decimals, 'amount')
  const transfer = await executeTransfer(runtime, orgId, {
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

/**
 * A module that owns holds (payments) adds its own rows and events to the commit that expires one,
 * so the owner's state changes in the same transaction as the hold's. The sweep first hands it the
 * owned holds about to expire, so it can read what it needs for all of them at once (the owners'
 * rows, which memory does not keep); it answers how to extend each hold's commit. `false` leaves
 * that hold pending for a later sweep (its owner is not durable yet).
 */
export type HoldExpiryExtension = (holds: PendingHold[]) => Promise<ExpiryExtender>
export type ExpiryExtender = (hold: PendingHold, operation: LedgerOperation, now: Date) => boolean
const expiryExtensions = new WeakMap<Runtime, HoldExpiryExtension[]>()

export function onHoldExpiry(runtime: Runtime, extension: HoldExpiryExtension): void {
  const list = expiryExtensions.get(runtime) ?? []
  list.push(extension)
  expiryExtensions.set(runtime, list)
}

/** The commit that returns the whole hold to available, by request (`released`) or by the clock (`expired`). */
function closingOperation(runtime: Runtime, hold: PendingHold, state: 'released' | 'expired'): { operation: LedgerOperation; row: HoldRow; now: Date } {
  const now = runtime.clock.now(hold.orgId)
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
    ...closingHooks(runtime, hold, state === 'expired'),
  }
  return { operation, row, now }
}

/** Expires one due hold, its owner's rows joining the commit; false when an owner asks it to wait. */
async function expireHold(runtime: Runtime, hold: PendingHold, extenders: readonly ExpiryExtender[]): Promise<boolean> {
  const { operation, now } = closingOperation(runtime, hold, 'expired')
  if (hold.ownerId !== undefined && !extenders.every((extend) => extend(hold, operation, now))) return false
  await runtime.ledger.submit(operation)
  return true
}

export async function releaseHold(runtime: Runtime, orgId: string, holdId: string): Promise<HoldView> {
  await requirePendingHold(runtime, orgId, holdId)
  const hold = takePendingHold(runtime, orgId, holdId)
  const { operation, row } = closingOperation(runtime, hold, 'released')
  operation.idempotencyRecord = answerInCommit(toHoldView(row))
  await runtime.ledger.submit(operation)
  return toHoldView(row)
}

export async function getHold(runtime: Runtime, orgId: string, holdId: string): Promise<HoldView> {
  const row: HoldRecord | undefined = await findHoldRecord(runtime, orgId, holdId)
  if (!row) throw notFound('hold')
  return toHoldView(row)
}

/**
 * Expires every pending hold whose organization's clock has reached its expiry. The owners of the
 * owned ones read their rows first; holds taken meanwhile (captured, voided, closing) are left to
 * whoever took them.
 */
export async function expireDueHolds(runtime: Runtime): Promise<number> {
  const pending = runtime.ledger.holds
  const due = pending.due((orgId) => runtime.clock.nowMs(orgId), EXPIRY_SWEEP_BATCH_MAX)
  const owned = due.filter((hold) => hold.ownerId !== undefined)
  let extenders: ExpiryExtender[] = []
  if (owned.length > 0) {
    try {
      extenders = await Promise.all((expiryExtensions.get(runtime) ?? []).map((prepare) => prepare(owned)))
    } catch (error) {
      logFailure('holds.expiry', 'hold expiry could not read the owners of the holds due; the next sweep retries', error)
      return 0
    }
  }
  const still = due.filter((hold) => pending.isPending(hold) && !hold.closing)
  const outcomes = await Promise.allSettled(still.map((hold) => expireHold(runtime, hold, extenders)))
  for (const outcome of outcomes) if (outcome.status === 'rejected') console.error('hold expiry failed; the next sweep retries', outcome.reason)
  return outcomes.filter((outcome) => outcome.status === 'fulfilled' && outcome.value).length
}

/** Runs the expiry sweep in the background until the runtime stops. */
export function startHoldExpiry(runtime: Runtime): void {
  let sweeping: Promise<unknown> | undefined
  const timer = setInterval(() => {
    if (sweeping) return
    sweeping = expireDueHolds(runtime).finally(() => {
      sweeping = undefined
    })
  }, EXPIRY_SWEEP_INTERVAL_MS)
  timer.unref()
  runtime.stoppers.push(async () => {
    clearInterval(timer)
    await sweeping
    await runtime.ledger.drain()
  })
}
