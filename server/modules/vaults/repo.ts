import { and, asc, desc, eq, isNull, lte } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { vaultCycles, vaultPrices, vaults } from '../../../db/schema/index.ts'
import { newId } from '../../lib/ids.ts'

export type VaultRecord = typeof vaults.$inferSelect
export type CycleRecord = typeof vaultCycles.$inferSelect
export type CycleKind = CycleRecord['kind']
export type PriceRecord = typeof vaultPrices.$inferSelect

export async function insertVault(executor: Executor, row: VaultRecord): Promise<void> {
  await executor.insert(vaults).values(row)
}

export async function findVault(executor: Executor, id: string): Promise<VaultRecord | undefined> {
  const [row] = await executor.select().from(vaults).where(eq(vaults.id, id))
  return row
}

export async function listVaults(executor: Executor): Promise<VaultRecord[]> {
  return executor.select().from(vaults).orderBy(asc(vaults.id))
}

export async function updateVault(executor: Executor, id: string, set: Partial<VaultRecord>): Promise<VaultRecord | undefined> {
  const [row] = await executor.update(vaults).set(set).where(eq(vaults.id, id)).returning()
  return row
}

export async function insertPrice(executor: Executor, row: PriceRecord): Promise<void> {
  await executor.insert(vaultPrices).values(row).onConflictDoUpdate({ target: [vaultPrices.vaultId, vaultPrices.at], set: { price: row.price, source: row.source } })
}

export async function latestPrice(executor: Executor, vaultId: string, atOrBefore?: Date): Promise<PriceRecord | undefined> {
  const where = atOrBefore === undefined ? eq(vaultPrices.vaultId, vaultId) : and(eq(vaultPrices.vaultId, vaultId), lte(vaultPrices.at, atOrBefore))
  const [row] = await executor.select().from(vaultPrices).where(where).orderBy(desc(vaultPrices.at)).limit(1)
  return row
}

export function newCycle(vaultId: string, kind: CycleKind, number: number, openedAt: Date): CycleRecord {
  return {
    id: newId('vcy'),
    vaultId,
    kind,
    number,
    state: 'open',
    openedAt,
    closedAt: null,
    finishedAt: null,
    price: null,
    totalAmount: null,
    totalShares: null,
    fee: null,
    intents: null,
    resolution: null,
    resolutionPrice: null,
    resolutionDigest: null,
  }
}

export async function insertCycle(executor: Executor, row: CycleRecord): Promise<void> {
  await executor.insert(vaultCycles).values(row)
}

/**
 * Records what will become of a closed cycle (cluster mode), once: answers the cycle as decided, by
 * this call or by one before it, or undefined when it is no longer closed.
 */
export async function decideResolution(executor: Executor, id: string, resolution: 'settle' | 'rollback', price: bigint | null, digest: string | null): Promise<CycleRecord | undefined> {
  await executor
    .update(vaultCycles)
    .set({ resolution, resolutionPrice: price, resolutionDigest: digest })
    .where(and(eq(vaultCycles.id, id), eq(vaultCycles.state, 'closed'), isNull(vaultCycles.resolution)))
  const row = await findCycle(executor, id)
  return row?.state === 'closed' ? row : undefined
}

export async function findCycle(executor: Executor, id: string): Promise<CycleRecord | undefined> {
  const [row] = await executor.select().from(vaultCycles).where(eq(vaultCycles.id, id))
  return row
}

/** The vault's open cycle of a kind: the newest one (a vault always has one of each). */
export async function openCycle(executor: Executor, vaultId: string, kind: CycleKind): Promise<CycleRecord | undefined> {
  const [row] = await executor
    .select()
    .from(vaultCycles)
    .where(and(eq(vaultCycles.vaultId, vaultId), eq(vaultCycles.kind, kind), eq(vaultCycles.state, 'open')))
    .orderBy(desc(vaultCycles.number))
    .limit(1)
  return row
}

export async function listCycles(executor: Executor, vaultId: string, limit: number): Promise<CycleRecord[]> {
  return executor.select().from(vaultCycles).where(eq(vaultCycles.vaultId, vaultId)).orderBy(desc(vaultCycles.number), asc(vaultCycles.kind)).limit(limit)
}

/** Cycles that are closed and not yet settled or rolled back (the cadence worker settles them). */
export async function closedCycles(executor: Executor): Promise<CycleRecord[]> {
  return executor.select().from(vaultCycles).where(eq(vaultCycles.state, 'closed')).orderBy(asc(vaultCycles.openedAt))
}
