import { SYSTEM_ACCOUNTS } from '../../ledger/hot-balances.ts'
import type { ChainArrivalRow, DepositRow } from './write-sets.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { NETWORKS, parseAddress, type Network } from '../chain/addresses.ts'
import { blockAt, confirmationsRequired, finalityAt, NETWORK_PACE, parseTxHash } from '../chain/networks.ts'
import { SWEEP_BATCH_MAX, wakeSweepFor, type DepositsContext } from './context.ts'
import { amountMatchOf, confirmedEvent, matchDeclared } from './declared.ts'
import type { ArrivalInput, ChainArrivalView } from './model.ts'
import * as repo from './repo.ts'
import type { ArrivalRecord } from './repo.ts'
import { arrivalStillIn, decimalsOf, depositStillAwaiting, firstObservation, iso, resolveRail } from './rules.ts'

// Chain arrivals: transfers observed at an address, credited in flight to the account that owns
// it (or held in suspense), and made available when they reach finality.

export function toArrivalView(context: DepositsContext, row: ArrivalRecord | ChainArrivalRow): ChainArrivalView {
  const required = confirmationsRequired(row.network)
  const observedMs = row.observedAt.getTime()
  const behind = Math.floor((context.clock.nowMs(row.orgId) - observedMs) / NETWORK_PACE[row.network].blockIntervalMs)
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
export async function observeArrival(context: DepositsContext, orgId: string, input: ArrivalInput): Promise<{ arrival: ChainArrivalView; created: boolean }> {
  if (!(NETWORKS as readonly string[]).includes(input.network)) throw invalid('network', `network must be one of ${NETWORKS.join(', ')}`)
  const network = input.network as Network
  const info = resolveRail(input.asset, network)
  const address = parseAddress(network, input.address, 'address')
  const txHash = parseTxHash(network, input.txHash, 'txHash')
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  const observed = await context.serialized(async (): Promise<{ arrival: ChainArrivalView; created: boolean }> => {
    const existing = await repo.findArrivalByKey(context.db, network, txHash, address)
    if (existing) {
      if (existing.orgId !== orgId || existing.asset !== info.asset || existing.amount !== amountMinor) {
        throw new ApiError('conflict', `Transaction ${txHash} to ${address} was already observed with different contents`, { field: 'txHash' })
      }
      return { arrival: toArrivalView(context, existing), created: false }
    }
    const observedMs = context.clock.nowMs(orgId)
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
    const owner = await repo.findAddressByValue(context.db, network, address)
    if (!owner || owner.orgId !== orgId || owner.asset !== info.asset) {
      // Never credited silently: it waits in suspense for an operator.
      if (await repo.insertArrival(context.db, arrival)) return { arrival: toArrivalView(context, arrival), created: true }
      const raced = await repo.findArrivalByKey(context.db, network, txHash, address)
      if (!raced || raced.orgId !== orgId || raced.asset !== info.asset || raced.amount !== amountMinor) {
        throw new ApiError('conflict', `Transaction ${txHash} to ${address} was already observed with different contents`, { field: 'txHash' })
      }
      return { arrival: toArrivalView(context, raced), created: false }
    }
    const declared = matchDeclared(await repo.awaitingDeposits(context.db, orgId, address, info.asset), amountMinor, observedMs)
    // The owner's balances must be in memory before the credit is decided (a first touch reads them).
    await context.ledger.accounts.find(owner.accountId)
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
    const submitted = context.ledger.submit({
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
      const raced = error instanceof ApiError && error.code === 'conflict' ? await repo.findArrivalByKey(context.db, network, txHash, address) : undefined
      if (!raced || raced.orgId !== orgId || raced.amount !== amountMinor) throw error
      return { arrival: toArrivalView(context, raced), created: false }
    }
    return { arrival: toArrivalView(context, credited), created: true }
  })
  if (observed.created) wakeSweepFor(context, orgId, new Date(observed.arrival.finalAt))
  return observed
}

export async function getArrival(context: DepositsContext, orgId: string | undefined, id: string): Promise<ChainArrivalView> {
  const row = await repo.findArrival(context.db, id)
  if (!row || (orgId !== undefined && row.orgId !== orgId)) throw notFound('arrival')
  return toArrivalView(context, row)
}

/**
 * One arrival reaching finality, in one commit: a deposit's in-flight amount becomes available
 * (and the deposit completes, with `funding.deposit.confirmed`); an unmatched arrival's amount
 * moves from chain clearing to the organization's suspense account.
 */
async function finalizeArrival(context: DepositsContext, arrival: ArrivalRecord): Promise<void> {
  const now = context.clock.now(arrival.orgId)
  const final: ChainArrivalRow = { ...arrival, state: 'final', finalizedAt: now }
  const once = arrivalStillIn(arrival.id, 'confirming', arrival.disposition, { state: 'final', finalizedAt: now })
  if (arrival.disposition === 'deposit') {
    const deposit = await repo.findDeposit(context.db, arrival.orgId, arrival.depositId!)
    const account = await context.ledger.accounts.find(arrival.accountId!)
    const completed: DepositRow = { ...deposit!, state: 'completed', completedAt: now }
    await context.ledger.submit({
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
  await context.ledger.submit({
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
export function finalizeDueArrivals(context: DepositsContext, orgId?: string): Promise<number> {
  return context.serialized(async () => {
    const due = (await repo.confirmingArrivals(context.db, new Date(context.clock.latestNowMs()), SWEEP_BATCH_MAX, context.ownedOrganizations)).filter(
      (row) => (orgId === undefined || row.orgId === orgId) && context.clock.nowMs(row.orgId) >= row.finalAt.getTime(),
    )
    let finalized = 0
    for (const arrival of due) {
      try {
        await finalizeArrival(context, arrival)
        finalized += 1
      } catch (error) {
        // A conflict means another instance finalized it first: nothing to retry.
        if (!(error instanceof ApiError && error.code === 'conflict')) console.error(`deposits: finalizing arrival ${arrival.id} failed; the next sweep retries`, error)
      }
    }
    return finalized
  })
}
