import { EVERY_ORGANIZATION, type OwnedOrganizations } from '../../platform/ownership.ts'
import { and, asc, desc, eq, gt, inArray, lte, min, ne, type SQL } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { chainArrivals, depositAddresses, deposits } from '../../../db/schema/index.ts'
import type { Network } from '../chain/addresses.ts'

export type DepositAddressRecord = typeof depositAddresses.$inferSelect
export type DepositRecord = typeof deposits.$inferSelect
export type ArrivalRecord = typeof chainArrivals.$inferSelect

export async function findActiveAddress(executor: Executor, orgId: string, accountId: string, asset: string, network: Network): Promise<DepositAddressRecord | undefined> {
  const [row] = await executor
    .select()
    .from(depositAddresses)
    .where(and(eq(depositAddresses.orgId, orgId), eq(depositAddresses.accountId, accountId), eq(depositAddresses.asset, asset), eq(depositAddresses.network, network), eq(depositAddresses.state, 'active')))
  return row
}

export async function nextDerivationIndex(executor: Executor, orgId: string, accountId: string, asset: string, network: Network): Promise<number> {
  const [row] = await executor
    .select({ index: depositAddresses.derivationIndex })
    .from(depositAddresses)
    .where(and(eq(depositAddresses.orgId, orgId), eq(depositAddresses.accountId, accountId), eq(depositAddresses.asset, asset), eq(depositAddresses.network, network)))
    .orderBy(desc(depositAddresses.derivationIndex))
    .limit(1)
  return row ? row.index + 1 : 0
}

/** Inserts unless another request created the active address (or this index) first; undefined then. */
export async function insertAddress(executor: Executor, row: typeof depositAddresses.$inferInsert): Promise<DepositAddressRecord | undefined> {
  const [inserted] = await executor.insert(depositAddresses).values(row).onConflictDoNothing().returning()
  return inserted
}

export async function findAddress(executor: Executor, orgId: string, accountId: string, id: string): Promise<DepositAddressRecord | undefined> {
  const [row] = await executor.select().from(depositAddresses).where(and(eq(depositAddresses.orgId, orgId), eq(depositAddresses.accountId, accountId), eq(depositAddresses.id, id)))
  return row
}

export async function findAddressByValue(executor: Executor, network: Network, address: string): Promise<DepositAddressRecord | undefined> {
  const [row] = await executor.select().from(depositAddresses).where(and(eq(depositAddresses.network, network), eq(depositAddresses.address, address)))
  return row
}

export async function listAddresses(executor: Executor, orgId: string, accountId: string, filter: { after?: string; limit: number }): Promise<DepositAddressRecord[]> {
  const conditions: SQL[] = [eq(depositAddresses.orgId, orgId), eq(depositAddresses.accountId, accountId)]
  if (filter.after !== undefined) conditions.push(gt(depositAddresses.id, filter.after))
  return executor.select().from(depositAddresses).where(and(...conditions)).orderBy(asc(depositAddresses.id)).limit(filter.limit)
}

export async function retireAddress(executor: Executor, id: string, retiredAt: Date): Promise<DepositAddressRecord | undefined> {
  const [row] = await executor
    .update(depositAddresses)
    .set({ state: 'retired', retiredAt })
    .where(and(eq(depositAddresses.id, id), eq(depositAddresses.state, 'active')))
    .returning()
  return row
}

export async function insertDeposit(executor: Executor, row: typeof deposits.$inferInsert): Promise<void> {
  await executor.insert(deposits).values(row)
}

export async function findDeposit(executor: Executor, orgId: string, id: string): Promise<DepositRecord | undefined> {
  const [row] = await executor.select().from(deposits).where(and(eq(deposits.orgId, orgId), eq(deposits.id, id)))
  return row
}

export async function listDeposits(executor: Executor, orgId: string, filter: { accountId?: string; after?: string; limit: number }): Promise<DepositRecord[]> {
  const conditions: SQL[] = [eq(deposits.orgId, orgId)]
  if (filter.accountId !== undefined) conditions.push(eq(deposits.accountId, filter.accountId))
  if (filter.after !== undefined) conditions.push(gt(deposits.id, filter.after))
  return executor.select().from(deposits).where(and(...conditions)).orderBy(asc(deposits.id)).limit(filter.limit)
}

/** Declared deposits still waiting for funds at an address, oldest first. */
export async function awaitingDeposits(executor: Executor, orgId: string, address: string, asset: string): Promise<DepositRecord[]> {
  return executor
    .select()
    .from(deposits)
    .where(and(eq(deposits.orgId, orgId), eq(deposits.address, address), eq(deposits.asset, asset), eq(deposits.state, 'awaiting_funds')))
    .orderBy(asc(deposits.id))
    .limit(100)
}

/** Declared deposits whose expiry is at or before `bound` (the latest any organization's clock can be). */
export async function awaitingDepositsExpiringBy(executor: Executor, bound: Date, limit: number, owned: OwnedOrganizations = EVERY_ORGANIZATION): Promise<DepositRecord[]> {
  return executor
    .select()
    .from(deposits)
    .where(and(eq(deposits.state, 'awaiting_funds'), lte(deposits.expiresAt, bound), owned(deposits.orgId)))
    .orderBy(asc(deposits.expiresAt))
    .limit(limit)
}

export async function expireDeposits(executor: Executor, ids: string[]): Promise<number> {
  if (ids.length === 0) return 0
  const rows = await executor
    .update(deposits)
    .set({ state: 'expired' })
    .where(and(inArray(deposits.id, ids), eq(deposits.state, 'awaiting_funds')))
    .returning({ id: deposits.id })
  return rows.length
}

export async function findArrivalByKey(executor: Executor, network: Network, txHash: string, address: string): Promise<ArrivalRecord | undefined> {
  const [row] = await executor.select().from(chainArrivals).where(and(eq(chainArrivals.network, network), eq(chainArrivals.txHash, txHash), eq(chainArrivals.address, address)))
  return row
}

export async function findArrival(executor: Executor, id: string): Promise<ArrivalRecord | undefined> {
  const [row] = await executor.select().from(chainArrivals).where(eq(chainArrivals.id, id))
  return row
}

/** False when the same observation (network, txHash, address) is already recorded. */
export async function insertArrival(executor: Executor, row: typeof chainArrivals.$inferInsert): Promise<boolean> {
  const inserted = await executor.insert(chainArrivals).values(row).onConflictDoNothing().returning({ id: chainArrivals.id })
  return inserted.length > 0
}

/**
 * Per organization, the earliest time (on its own clock) an arrival reaches finality or a declared
 * deposit expires: when the sweep next has work (see `DueSweep`).
 */
export async function nextDueWork(executor: Executor): Promise<Array<{ orgId: string; dueAt: Date | null }>> {
  const [finality, expiry] = await Promise.all([
    executor.select({ orgId: chainArrivals.orgId, dueAt: min(chainArrivals.finalAt) }).from(chainArrivals).where(eq(chainArrivals.state, 'confirming')).groupBy(chainArrivals.orgId),
    executor.select({ orgId: deposits.orgId, dueAt: min(deposits.expiresAt) }).from(deposits).where(eq(deposits.state, 'awaiting_funds')).groupBy(deposits.orgId),
  ])
  return [...finality, ...expiry]
}

export async function confirmingArrivals(executor: Executor, finalBy: Date, limit: number, owned: OwnedOrganizations = EVERY_ORGANIZATION): Promise<ArrivalRecord[]> {
  return executor
    .select()
    .from(chainArrivals)
    .where(and(eq(chainArrivals.state, 'confirming'), lte(chainArrivals.finalAt, finalBy), owned(chainArrivals.orgId)))
    .orderBy(asc(chainArrivals.finalAt))
    .limit(limit)
}

export async function listSuspense(executor: Executor, filter: { orgId?: string; disposition?: 'suspense' | 'assigned' | 'returned'; after?: string; limit: number }): Promise<ArrivalRecord[]> {
  const conditions: SQL[] = [filter.disposition === undefined ? ne(chainArrivals.disposition, 'deposit') : eq(chainArrivals.disposition, filter.disposition)]
  if (filter.orgId !== undefined) conditions.push(eq(chainArrivals.orgId, filter.orgId))
  if (filter.after !== undefined) conditions.push(gt(chainArrivals.id, filter.after))
  return executor.select().from(chainArrivals).where(and(...conditions)).orderBy(asc(chainArrivals.id)).limit(filter.limit)
}
