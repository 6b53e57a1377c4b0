import { eventRow } from '../events/write-sets.ts'
import { answerInCommit, writeWithAnswer } from '../../platform/idempotency.ts'
import { SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import { and, eq } from 'drizzle-orm'
import type { Transaction } from '../../../db/client.ts'
import { chainArrivals, deposits as depositsTable } from '../../../db/schema/index.ts'
import type { GuardedWrite } from '../../ledger/writer.ts'
import type { EventRow } from '../events/write-sets.ts'
import type { ChainArrivalRow, DepositRow } from './write-sets.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { Runtime } from '../../runtime.ts'
import { findAsset, requireAsset, type AssetInfo } from '../../lib/assets.ts'
import { NETWORKS, parseAddress, type Network } from '../chain/addresses.ts'
import { blockAt, confirmationsRequired, finalityAt, NETWORK_PACE, parseTxHash } from '../chain/networks.ts'
import type { ArrivalInput, ChainArrivalView, CreateDepositAddressInput, CreateDepositInput, DepositAddressView, DepositView } from './model.ts'
import * as repo from './repo.ts'
import type { ArrivalRecord, DepositAddressRecord, DepositRecord } from './repo.ts'
import { DueSweep, earliestWallMs, whenDue } from '../../platform/due-sweep.ts'

/** A declared deposit is matched by arrivals observed within this long on the organization's clock. */
export const DECLARED_DEPOSIT_LIFETIME_MS = 24 * 3600 * 1000
/**
 * The sweep for arrivals that reached finality and declared deposits that expired runs when the
 * earliest of them falls due (see `DueSweep`), and at least this often for what another instance
 * wrote or a wall clock that jumped.
 */
const SWEEP_BACKSTOP_MS = 2000
/** The least time between passes while work stays due (the interval the sweep used to poll at). */
const SWEEP_MIN_GAP_MS = 250
/** One sweep finalizes or expires at most this many rows; the next sweep takes the rest. */
const SWEEP_BATCH_MAX = 500

/**
 * Every change to arrivals and deposits (observe, finalize, assign, return, expire) runs one at a
 * time in this process. Each decides against the database and writes through the ledger before the
 * next starts, so an arrival is never recorded twice, a declared deposit never matches two
 * arrivals, and a suspense arrival is never both assigned and returned. The unique key on
 * (network, txHash, address) still refuses a second row if another instance raced this one.
 */
const locks = new WeakMap<Runtime, { tail: Promise<unknown> }>()

function serialized<T>(runtime: Runtime, work: () => Promise<T>): Promise<T> {
  let lock = locks.get(runtime)
  if (!lock) {
    lock = { tail: Promise.resolve() }
    locks.set(runtime, lock)
  }
  const run = lock.tail.then(work)
  lock.tail = run.catch(() => {})
  return run
}

const iso = (value: Date | null | undefined) => (value ? value.toISOString() : null)

/**
 * A condition checked inside the commit that moves the money (see `LedgerOperation.guardedWrites`):
 * the write touches its row only if the row is still in the expected state, so two instances
 * sweeping the same arrival, or resolving the same suspense item, move its money once.
 */
function guard(write: (tx: Transaction) => Promise<unknown[]>, refusal: () => ApiError): GuardedWrite {
  return { write: async (tx) => (await write(tx)).length > 0, refusal }
}

/** The arrival is recorded by the commit that credits it, unless another instance recorded it first. */
function firstObservation(row: ChainArrivalRow): GuardedWrite {
  return guard(
    (tx) => tx.insert(chainArrivals).values(row).onConflictDoNothing().returning({ id: chainArrivals.id }),
    () => new ApiError('conflict', `Transaction ${row.txHash} to ${row.address} was observed by another request`, { field: 'txHash' }),
  )
}

function arrivalStillIn(arrivalId: string, state: 'confirming' | 'final', disposition: ArrivalRecord['disposition'], set: Partial<ArrivalRecord>): GuardedWrite {
  return guard(
    (tx) =>
      tx
        .update(chainArrivals)
        .set(set)
        .where(and(eq(chainArrivals.id, arrivalId), eq(chainArrivals.state, state), eq(chainArrivals.disposition, disposition)))
        .returning({ id: chainArrivals.id }),
    () => new ApiError('conflict', `Arrival ${arrivalId} was moved on by another request`),
  )
}

function depositStillAwaiting(depositId: string): GuardedWrite {
  return guard(
    (tx) => tx.select({ id: depositsTable.id }).from(depositsTable).where(and(eq(depositsTable.id, depositId), eq(depositsTable.state, 'awaiting_funds'))).for('update'),
    () => new ApiError('conflict', `Deposit ${depositId} was matched by another arrival; observe this arrival again`, { field: 'txHash' }),
  )
}

function decimalsOf(asset: string): number {
  return findAsset(asset)?.decimals ?? 0
}

/** The network a request names, or the asset's own; an asset on another network is `unsupported_asset`. */
function resolveRail(asset: string, network: string | undefined, assetField = 'asset'): AssetInfo {
  const info = requireAsset(asset, assetField)
  if (network === undefined) return info
  if (!(NETWORKS as readonly string[]).includes(network)) throw invalid('network', `network must be one of ${NETWORKS.join(', ')}`)
  if (info.network !== network) throw new ApiError('unsupported_asset', `${info.asset} is supported on ${info.network} only`, { field: 'network' })
  return info
}

// ---------------------------------------------------------------------------------------------
// Deposit addresses

export function toAddressView(row: DepositAddressRecord): DepositAddressView {
  return {
    id: row.id,
    accountId: row.accountId,
    asset: row.asset,
    network: row.network,
    address: row.address,
    state: row.state,
    createdAt: row.createdAt.toISOString(),
    retiredAt: iso(row.retiredAt),
  }
}

/** The account's active address on a rail, derived and stored on first use. Safe under concurrent calls. */
async function ensureAddress(runtime: Runtime, orgId: string, accountId: string, info: AssetInfo): Promise<{ row: DepositAddressRecord; created: boolean }> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const existing = await repo.findActiveAddress(runtime.db, orgId, accountId, info.asset, info.network)
    if (existing) return { row: existing, created: false }
    const index = await repo.nextDerivationIndex(runtime.db, orgId, accountId, info.asset, info.network)
    const address = runtime.addresses.depositAddress({ orgId, accountId, asset: info.asset, network: info.network, index })
    const inserted = await repo.insertAddress(runtime.db, {
      id: newId('addr'),
      orgId,
      accountId,
      asset: info.asset,
      network: info.network,
      address,
      derivationIndex: index,
      state: 'active',
      createdAt: runtime.clock.now(orgId),
      retiredAt: null,
    })
    if (inserted) return { row: inserted, created: true }
    // Another request created it (or took this index) first; read again.
  }
  throw new ApiError('conflict', 'The deposit address is being created by another request; retry')
}

export async function createDepositAddress(runtime: Runtime, orgId: string, accountId: string, input: CreateDepositAddressInput): Promise<{ address: DepositAddressView; created: boolean }> {
  const info = resolveRail(input.asset, input.network)
  await runtime.ledger.accounts.require(orgId, accountId)
  const { row, created } = await ensureAddress(runtime, orgId, accountId, info)
  return { address: toAddressView(row), created }
}

export async function listDepositAddresses(runtime: Runtime, orgId: string, accountId: string, query: { after?: string; limit?: number }): Promise<{ depositAddresses: DepositAddressView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  await runtime.ledger.accounts.require(orgId, accountId)
  const page = onePage(await repo.listAddresses(runtime.db, orgId, accountId, { after: query.after, limit: limit + 1 }), limit, toAddressView)
  return { depositAddresses: page.items, hasMore: page.hasMore }
}

/** Retires an address: no longer handed out, but still watched forever and still crediting. Retiring twice answers the retired address. */
export async function retireDepositAddress(runtime: Runtime, orgId: string, accountId: string, addressId: string): Promise<DepositAddressView> {
  await runtime.ledger.accounts.require(orgId, accountId)
  const row = await repo.findAddress(runtime.db, orgId, accountId, addressId)
  if (!row) throw notFound('deposit address')
  if (row.state === 'retired') return toAddressView(row)
  const retired = await repo.retireAddress(runtime.db, row.id, runtime.clock.now(orgId))
  return toAddressView(retired ?? (await repo.findAddress(runtime.db, orgId, accountId, addressId))!)
}

// ---------------------------------------------------------------------------------------------
// Declared deposits

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
export async function createDeposit(runtime: Runtime, orgId: string, input: CreateDepositInput): Promise<DepositView> {
  const info = resolveRail(input.asset, input.network)
  const expectedMinor = parseAmount(input.amount, info.decimals, 'amount')
  const account = await runtime.ledger.accounts.require(orgId, input.accountId, 'accountId')
  const { row: address } = await ensureAddress(runtime, orgId, account.id, info)
  const now = runtime.clock.now(orgId)
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
  await writeWithAnswer(runtime.db, (executor) => repo.insertDeposit(executor, row), () => toDepositView(row))
  wakeSweepFor(runtime, orgId, row.expiresAt!)
  return toDepositView(row)
}

export async function getDeposit(runtime: Runtime, orgId: string, id: string): Promise<DepositView> {
  const row = await repo.findDeposit(runtime.db, orgId, id)
  if (!row) throw notFound('deposit')
  return toDepositView(row)
}

export async function listDeposits(runtime: Runtime, orgId: string, query: { accountId?: string; after?: string; limit?: number }): Promise<{ deposits: DepositView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listDeposits(runtime.db, orgId, { accountId: query.accountId, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toDepositView)
  return { deposits: page.items, hasMore: page.hasMore }
}

/**
 * The matching rule: among the declared deposits still awaiting funds at the address (same asset,
 * not expired at the arrival's observation on the organization's clock), the oldest whose amount
 * is exactly the arrival's; otherwise the oldest of them (under- or over-delivery).
 */
function matchDeclared(candidates: DepositRecord[], amountMinor: bigint, observedMs: number): DepositRecord | undefined {
  const open = candidates.filter((row) => row.expiresAt !== null && observedMs < row.expiresAt.getTime())
  return open.find((row) => row.expectedAmount === amountMinor) ?? open[0]
}

function amountMatchOf(expected: bigint, received: bigint): 'exact' | 'under' | 'over' {
  return received === expected ? 'exact' : received < expected ? 'under' : 'over'
}

// ---------------------------------------------------------------------------------------------
// Chain arrivals

export function toArrivalView(runtime: Runtime, row: ArrivalRecord | ChainArrivalRow): ChainArrivalView {
  const required = confirmationsRequired(row.network)
  const observedMs = row.observedAt.getTime()
  const behind = Math.floor((runtime.clock.nowMs(row.orgId) - observedMs) / NETWORK_PACE[row.network].blockIntervalMs)
  return {
    id: row.id,
    orgId: row.orgId,
    network: row.network,
    asset: row.asset,
    address: row.address,
    amount: formatAmount(row.amount, decimalsOf(row.asset)),
    txHash: row.txHash,
    block: row.block,
    confirmations: row.state === 'final' ? required : Math.max(0, Math.min(required, behind)),
    confirmationsRequired: required,
    state: row.state,
    disposition: row.disposition,
    accountId: row.accountId ?? null,
    depositId: row.depositId ?? null,
    observedAt: row.observedAt.toISOString(),
    finalAt: row.finalAt.toISOString(),
    resolvedAt: iso(row.resolvedAt),
    resolutionNote: row.resolutionNote ?? null,
  }
}

/**
 * An arrival observed on chain (posted by the sandbox simulator's route; a real chain watcher
 * would call the same). Observed twice, it is recorded and credited once: the second answer is the
 * first arrival (`created: false`). To a deposit address of the organization, it is in flight on
 * the account at once (chain clearing → inFlight), matched to a declared deposit if one fits;
 * otherwise it waits in suspense without touching any account.
 */
export async function observeArrival(runtime: Runtime, orgId: string, input: ArrivalInput): Promise<{ arrival: ChainArrivalView; created: boolean }> {
  if (!(NETWORKS as readonly string[]).includes(input.network)) throw invalid('network', `network must be one of ${NETWORKS.join(', ')}`)
  const network = input.network as Network
  const info = resolveRail(input.asset, network)
  const address = parseAddress(network, input.address, 'address')
  const txHash = parseTxHash(network, input.txHash, 'txHash')
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  const observed = await serialized(runtime, async (): Promise<{ arrival: ChainArrivalView; created: boolean }> => {
    const existing = await repo.findArrivalByKey(runtime.db, network, txHash, address)
    if (existing) {
      if (existing.orgId !== orgId || existing.asset !== info.asset || existing.amount !== amountMinor) {
        throw new ApiError('conflict', `Transaction ${txHash} to ${address} was already observed with different contents`, { field: 'txHash' })
      }
      return { arrival: toArrivalView(runtime, existing), created: false }
    }
    const observedMs = runtime.clock.nowMs(orgId)
    const observedAt = new Date(observedMs)
    const arrival: ChainArrivalRow & ArrivalRecord = {
      id: newId('arr'),
      orgId,
      network,
      asset: info.asset,
      address,
      amount: amountMinor,
      txHash,
      block: blockAt(network, observedMs).toString(),
      state: 'confirming',
      disposition: 'suspense',
      accountId: null,
      depositId: null,
      depositAddressId: null,
      observedAt,
      finalAt: new Date(finalityAt(network, observedMs)),
      finalizedAt: null,
      resolvedAt: null,
      resolutionNote: null,
    }
    const owner = await repo.findAddressByValue(runtime.db, network, address)
    if (!owner || owner.orgId !== orgId || owner.asset !== info.asset) {
      // Never credited silently: it waits in suspense for an operator.
      if (await repo.insertArrival(runtime.db, arrival)) return { arrival: toArrivalView(runtime, arrival), created: true }
      const raced = await repo.findArrivalByKey(runtime.db, network, txHash, address)
      if (!raced || raced.orgId !== orgId || raced.asset !== info.asset || raced.amount !== amountMinor) {
        throw new ApiError('conflict', `Transaction ${txHash} to ${address} was already observed with different contents`, { field: 'txHash' })
      }
      return { arrival: toArrivalView(runtime, raced), created: false }
    }
    const declared = matchDeclared(await repo.awaitingDeposits(runtime.db, orgId, address, info.asset), amountMinor, observedMs)
    // The owner's balances must be in memory before the credit is decided (a first touch reads them).
    await runtime.ledger.accounts.find(owner.accountId)
    const deposit: DepositRow = declared
      ? { ...declared, state: 'confirming', receivedAmount: amountMinor, amountMatch: amountMatchOf(declared.expectedAmount!, amountMinor), arrivalId: arrival.id, txHash, arrivedAt: observedAt }
      : {
          id: newId('dep'),
          orgId,
          accountId: owner.accountId,
          asset: info.asset,
          network,
          source: 'deposit_address',
          state: 'confirming',
          expectedAmount: null,
          receivedAmount: amountMinor,
          amountMatch: null,
          depositAddressId: owner.id,
          address,
          arrivalId: arrival.id,
          txHash,
          expiresAt: null,
          createdAt: observedAt,
          arrivedAt: observedAt,
          completedAt: null,
        }
    const credited = { ...arrival, disposition: 'deposit' as const, accountId: owner.accountId, depositId: deposit.id, depositAddressId: owner.id }
    const submitted = runtime.ledger.submit({
      orgId,
      movementId: newId('mv'),
      movementKind: 'deposit_arrival',
      reference: arrival.id,
      createdAt: observedAt,
      postings: [
        { accountId: SYSTEM_ACCOUNTS.chainClearing, kind: 'system', bucket: 'available', asset: info.asset, amountMinor: -amountMinor },
        { accountId: owner.accountId, kind: 'customer', bucket: 'in_flight', asset: info.asset, amountMinor },
      ],
      guardedWrites: declared ? [firstObservation(credited), depositStillAwaiting(declared.id)] : [firstObservation(credited)],
      chainArrivals: [credited],
      deposits: [deposit],
    })
    try {
      await submitted
    } catch (error) {
      // Another instance recorded this very arrival first: answer it like any repeated observation.
      const raced = error instanceof ApiError && error.code === 'conflict' ? await repo.findArrivalByKey(runtime.db, network, txHash, address) : undefined
      if (!raced || raced.orgId !== orgId || raced.amount !== amountMinor) throw error
      return { arrival: toArrivalView(runtime, raced), created: false }
    }
    return { arrival: toArrivalView(runtime, credited), created: true }
  })
  if (observed.created) wakeSweepFor(runtime, orgId, new Date(observed.arrival.finalAt))
  return observed
}

export async function getArrival(runtime: Runtime, orgId: string | undefined, id: string): Promise<ChainArrivalView> {
  const row = await repo.findArrival(runtime.db, id)
  if (!row || (orgId !== undefined && row.orgId !== orgId)) throw notFound('arrival')
  return toArrivalView(runtime, row)
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

function confirmedEvent(deposit: DepositRow, externalId: string | null, now: Date): EventRow {
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

/**
 * One arrival reaching finality, in one commit: a deposit's in-flight amount becomes available
 * (and the deposit completes, with `funding.deposit.confirmed`); an unmatched arrival's amount
 * moves from chain clearing to the organization's suspense account.
 */
async function finalizeArrival(runtime: Runtime, arrival: ArrivalRecord): Promise<void> {
  const now = runtime.clock.now(arrival.orgId)
  const final: ChainArrivalRow = { ...arrival, state: 'final', finalizedAt: now }
  const once = arrivalStillIn(arrival.id, 'confirming', arrival.disposition, { state: 'final', finalizedAt: now })
  if (arrival.disposition === 'deposit') {
    const deposit = await repo.findDeposit(runtime.db, arrival.orgId, arrival.depositId!)
    const account = await runtime.ledger.accounts.find(arrival.accountId!)
    const completed: DepositRow = { ...deposit!, state: 'completed', completedAt: now }
    await runtime.ledger.submit({
      orgId: arrival.orgId,
      movementId: newId('mv'),
      movementKind: 'deposit_final',
      reference: arrival.id,
      createdAt: now,
      postings: [
        { accountId: arrival.accountId!, kind: 'customer', bucket: 'in_flight', asset: arrival.asset, amountMinor: -arrival.amount },
        { accountId: arrival.accountId!, kind: 'customer', bucket: 'available', asset: arrival.asset, amountMinor: arrival.amount },
      ],
      guardedWrites: [once],
      chainArrivals: [final],
      deposits: [completed],
      events: [confirmedEvent(completed, account?.externalId ?? null, now)],
    })
    return
  }
  await runtime.ledger.submit({
    orgId: arrival.orgId,
    movementId: newId('mv'),
    movementKind: 'suspense_arrival',
    reference: arrival.id,
    createdAt: now,
    postings: [
      { accountId: SYSTEM_ACCOUNTS.chainClearing, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: -arrival.amount },
      { accountId: SYSTEM_ACCOUNTS.suspense, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: arrival.amount },
    ],
    guardedWrites: [once],
    chainArrivals: [final],
  })
}

/** Finalizes every confirming arrival whose organization's clock has reached its finality (all organizations, or one). */
export function finalizeDueArrivals(runtime: Runtime, orgId?: string): Promise<number> {
  return serialized(runtime, async () => {
    const due = (await repo.confirmingArrivals(runtime.db, new Date(runtime.clock.latestNowMs()), SWEEP_BATCH_MAX)).filter(
      (row) => (orgId === undefined || row.orgId === orgId) && runtime.clock.nowMs(row.orgId) >= row.finalAt.getTime(),
    )
    let finalized = 0
    for (const arrival of due) {
      try {
        await finalizeArrival(runtime, arrival)
        finalized += 1
      } catch (error) {
        // A conflict means another instance finalized it first: nothing to retry.
        if (!(error instanceof ApiError && error.code === 'conflict')) console.error(`deposits: finalizing arrival ${arrival.id} failed; the next sweep retries`, error)
      }
    }
    return finalized
  })
}

/** Declared deposits nothing arrived for by their expiry become `expired` (a later arrival still credits, as a deposit-address deposit). */
export function expireDueDeposits(runtime: Runtime, orgId?: string): Promise<number> {
  return serialized(runtime, async () => {
    const due = (await repo.awaitingDepositsExpiringBy(runtime.db, new Date(runtime.clock.latestNowMs()), SWEEP_BATCH_MAX)).filter(
      (row) => (orgId === undefined || row.orgId === orgId) && runtime.clock.nowMs(row.orgId) >= row.expiresAt!.getTime(),
    )
    return repo.expireDeposits(
      runtime.db,
      due.map((row) => row.id),
    )
  })
}

// ---------------------------------------------------------------------------------------------
// Suspense (operators)

async function requireSuspense(runtime: Runtime, arrivalId: string): Promise<ArrivalRecord> {
  const arrival = await repo.findArrival(runtime.db, arrivalId)
  if (!arrival || arrival.disposition === 'deposit') throw notFound('suspense arrival')
  if (arrival.disposition !== 'suspense') throw new ApiError('conflict', `Arrival ${arrivalId} was already ${arrival.disposition}`)
  if (arrival.state !== 'final') throw new ApiError('conflict', `Arrival ${arrivalId} is still confirming; it can be resolved from ${arrival.finalAt.toISOString()}`)
  return arrival
}

/** Credits a final suspense arrival to an account of its organization: a completed deposit with source `suspense_assignment`. */
export function assignSuspense(runtime: Runtime, arrivalId: string, input: { accountId: string; note?: string }): Promise<ChainArrivalView> {
  return serialized(runtime, async () => {
    const arrival = await requireSuspense(runtime, arrivalId)
    const account = await runtime.ledger.accounts.require(arrival.orgId, input.accountId, 'accountId')
    const now = runtime.clock.now(arrival.orgId)
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
    const view = toArrivalView(runtime, assigned)
    await runtime.ledger.submit({
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
export function returnSuspense(runtime: Runtime, arrivalId: string, input: { note?: string }): Promise<ChainArrivalView> {
  return serialized(runtime, async () => {
    const arrival = await requireSuspense(runtime, arrivalId)
    const now = runtime.clock.now(arrival.orgId)
    const returned: ChainArrivalRow = { ...arrival, disposition: 'returned', resolvedAt: now, resolutionNote: input.note ?? null }
    const view = toArrivalView(runtime, returned)
    const postings: Posting[] = [
      { accountId: SYSTEM_ACCOUNTS.suspense, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: -arrival.amount },
      { accountId: SYSTEM_ACCOUNTS.chainClearing, kind: 'system', bucket: 'available', asset: arrival.asset, amountMinor: arrival.amount },
    ]
    await runtime.ledger.submit({
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
  runtime: Runtime,
  query: { orgId?: string; disposition?: 'suspense' | 'assigned' | 'returned'; after?: string; limit?: number },
): Promise<{ arrivals: ChainArrivalView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listSuspense(runtime.db, { ...query, limit: limit + 1 })
  const page = onePage(rows, limit, (row) => toArrivalView(runtime, row))
  return { arrivals: page.items, hasMore: page.hasMore }
}

export async function getSuspense(runtime: Runtime, arrivalId: string): Promise<ChainArrivalView> {
  const arrival = await repo.findArrival(runtime.db, arrivalId)
  if (!arrival || arrival.disposition === 'deposit') throw notFound('suspense arrival')
  return toArrivalView(runtime, arrival)
}

// ---------------------------------------------------------------------------------------------
// Background work

/** Finality and expiry, for all organizations or for one right after its clock moved. */
export async function runDueDepositWork(runtime: Runtime, orgId?: string): Promise<void> {
  await finalizeDueArrivals(runtime, orgId)
  await expireDueDeposits(runtime, orgId)
}

const sweeps = new WeakMap<Runtime, DueSweep>()

/** Tells the sweep of work this process just created, due at `at` on the organization's clock. */
function wakeSweepFor(runtime: Runtime, orgId: string, at: Date): void {
  sweeps.get(runtime)?.wake(runtime.clock.wallMsAt(orgId, at.getTime()))
}

export function startDeposits(runtime: Runtime): void {
  const wallNowMs = () => runtime.clock.wallNowMs()
  const nextDue = async () => earliestWallMs(runtime.clock, await repo.nextDueWork(runtime.db))
  const sweep = new DueSweep({ name: 'deposits', backstopMs: SWEEP_BACKSTOP_MS, minGapMs: SWEEP_MIN_GAP_MS, wallNowMs }, () => whenDue(wallNowMs, nextDue, () => runDueDepositWork(runtime)))
  sweeps.set(runtime, sweep)
  runtime.clock.onAdvance(async (orgId) => {
    await runDueDepositWork(runtime, orgId)
    // The organization's later work now falls due earlier.
    sweep.wake()
  })
  sweep.start()
  runtime.stoppers.push(async () => {
    await sweep.stop()
    await runtime.ledger.drain()
  })
}
