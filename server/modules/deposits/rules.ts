import { and, eq } from 'drizzle-orm'
import type { Transaction } from '../../../db/client.ts'
import { chainArrivals, deposits as depositsTable } from '../../../db/schema/index.ts'
import type { GuardedWrite } from '../../ledger/writer.ts'
import type { ChainArrivalRow } from './write-sets.ts'
import { findAsset, requireAsset, type AssetInfo } from '../../lib/assets.ts'
import { ApiError, invalid } from '../../lib/errors.ts'
import { NETWORKS } from '../chain/addresses.ts'
import type { ArrivalRecord } from './repo.ts'

// What the deposit services share: the rail a request names, and the guards that make each
// movement of an arrival's money happen once across instances.

export const iso = (value: Date | null | undefined) => (value ? value.toISOString() : null)

/**
 * A condition checked inside the commit that moves the money (see `LedgerOperation.guardedWrites`):
 * the write touches its row only if the row is still in the expected state, so two instances
 * sweeping the same arrival, or resolving the same suspense item, move its money once.
 */
export function guard(write: (tx: Transaction) => Promise<unknown[]>, refusal: () => ApiError): GuardedWrite {
  return { write: async (tx) => (await write(tx)).length > 0, refusal }
}

/** The arrival is recorded by the commit that credits it, unless another instance recorded it first. */
export function firstObservation(row: ChainArrivalRow): GuardedWrite {
  return guard(
    (tx) => tx.insert(chainArrivals).values(row).onConflictDoNothing().returning({ id: chainArrivals.id }),
    () => new ApiError('conflict', `Transaction ${row.txHash} to ${row.address} was observed by another request`, { field: 'txHash' }),
  )
}

export function arrivalStillIn(arrivalId: string, state: 'confirming' | 'final', disposition: ArrivalRecord['disposition'], set: Partial<ArrivalRecord>): GuardedWrite {
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

export function depositStillAwaiting(depositId: string): GuardedWrite {
  return guard(
    (tx) => tx.select({ id: depositsTable.id }).from(depositsTable).where(and(eq(depositsTable.id, depositId), eq(depositsTable.state, 'awaiting_funds'))).for('update'),
    () => new ApiError('conflict', `Deposit ${depositId} was matched by another arrival; observe this arrival again`, { field: 'txHash' }),
  )
}

export function decimalsOf(asset: string): number {
  return findAsset(asset)?.decimals ?? 0
}

/** The network a request names, or the asset's own; an asset on another network is `unsupported_asset`. */
export function resolveRail(asset: string, network: string | undefined, assetField = 'asset'): AssetInfo {
  const info = requireAsset(asset, assetField)
  if (network === undefined) return info
  if (!(NETWORKS as readonly string[]).includes(network)) throw invalid('network', `network must be one of ${NETWORKS.join(', ')}`)
  if (info.network !== network) throw new ApiError('unsupported_asset', `${info.asset} is supported on ${info.network} only`, { field: 'network' })
  return info
}