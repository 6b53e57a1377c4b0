import { ApiError, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { AssetInfo } from '../../lib/assets.ts'
import type { DepositsContext } from './context.ts'
import type { CreateDepositAddressInput, DepositAddressView } from './model.ts'
import * as repo from './repo.ts'
import type { DepositAddressRecord } from './repo.ts'
import { iso, resolveRail } from './rules.ts'

// Deposit addresses: one active address per (account, asset, network), derived from the key
// material, retired but never forgotten (an arrival at a retired address still credits).

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
export async function ensureAddress(context: DepositsContext, orgId: string, accountId: string, info: AssetInfo): Promise<{ row: DepositAddressRecord; created: boolean }> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const existing = await repo.findActiveAddress(context.db, orgId, accountId, info.asset, info.network)
    if (existing) return { row: existing, created: false }
    const index = await repo.nextDerivationIndex(context.db, orgId, accountId, info.asset, info.network)
    const address = context.addresses.depositAddress({ orgId, accountId, asset: info.asset, network: info.network, index })
    const inserted = await repo.insertAddress(context.db, {
      id: newId('addr'),
      orgId,
      accountId,
      asset: info.asset,
      network: info.network,
      address,
      derivationIndex: index,
      state: 'active',
      createdAt: context.clock.now(orgId),
      retiredAt: null,
    })
    if (inserted) return { row: inserted, created: true }
    // Another request created it (or took this index) first; read again.
  }
  throw new ApiError('conflict', 'The deposit address is being created by another request; retry')
}

export async function createDepositAddress(context: DepositsContext, orgId: string, accountId: string, input: CreateDepositAddressInput): Promise<{ address: DepositAddressView; created: boolean }> {
  const info = resolveRail(input.asset, input.network)
  await context.ledger.accounts.require(orgId, accountId)
  const { row, created } = await ensureAddress(context, orgId, accountId, info)
  return { address: toAddressView(row), created }
}

export async function listDepositAddresses(context: DepositsContext, orgId: string, accountId: string, query: { after?: string; limit?: number }): Promise<{ depositAddresses: DepositAddressView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  await context.ledger.accounts.require(orgId, accountId)
  const page = onePage(await repo.listAddresses(context.db, orgId, accountId, { after: query.after, limit: limit + 1 }), limit, toAddressView)
  return { depositAddresses: page.items, hasMore: page.hasMore }
}

/** Retires an address: no longer handed out, but still watched forever and still crediting. Retiring twice answers the retired address. */
export async function retireDepositAddress(context: DepositsContext, orgId: string, accountId: string, addressId: string): Promise<DepositAddressView> {
  await context.ledger.accounts.require(orgId, accountId)
  const row = await repo.findAddress(context.db, orgId, accountId, addressId)
  if (!row) throw notFound('deposit address')
  if (row.state === 'retired') return toAddressView(row)
  const retired = await repo.retireAddress(context.db, row.id, context.clock.now(orgId))
  return toAddressView(retired ?? (await repo.findAddress(context.db, orgId, accountId, addressId))!)
}