import { and, asc, eq, gt, inArray, isNull, sql } from 'drizzle-orm'
import type { Database, Executor } from '../../../db/client.ts'
import { apiKeys, organizations, withdrawalApprovalThresholds } from '../../../db/schema/index.ts'
import type { CachedKey, CachedOrg, KeyCache } from '../../platform/key-cache.ts'

export type OrganizationRow = typeof organizations.$inferSelect
export type ApiKeyRow = typeof apiKeys.$inferSelect

export function toCachedKey(row: ApiKeyRow): CachedKey {
  return {
    id: row.id,
    orgId: row.orgId,
    type: row.type,
    environment: row.environment,
    keyHash: row.keyHash,
    expiresAtMs: row.expiresAt?.getTime() ?? null,
    revoked: row.revokedAt !== null,
  }
}

export function toCachedOrg(row: OrganizationRow): CachedOrg {
  return { id: row.id, rateLimitPerMinute: row.rateLimitPerMinute, limitsVersion: row.limitsVersion }
}

export async function loadKeyCache(db: Database, cache: KeyCache): Promise<void> {
  for (const row of await db.select().from(apiKeys)) cache.upsertKey(toCachedKey(row))
  for (const row of await db.select().from(organizations)) cache.upsertOrg(toCachedOrg(row))
}

export async function refreshCachedKey(db: Database, cache: KeyCache, keyId: string): Promise<void> {
  const [row] = await db.select().from(apiKeys).where(eq(apiKeys.id, keyId))
  if (row) cache.upsertKey(toCachedKey(row))
}

/** A key and its organization by the key's hash, for a key missing from the cache. */
export async function readKeyByHash(db: Database, keyHash: string): Promise<{ key: CachedKey; org: CachedOrg | undefined } | undefined> {
  const [row] = await db.select().from(apiKeys).where(eq(apiKeys.keyHash, keyHash))
  if (row === undefined) return undefined
  const org = await findOrganization(db, row.orgId)
  return { key: toCachedKey(row), org: org === undefined ? undefined : toCachedOrg(org) }
}

export async function refreshCachedOrg(db: Database, cache: KeyCache, orgId: string): Promise<void> {
  const [row] = await db.select().from(organizations).where(eq(organizations.id, orgId))
  if (row) cache.upsertOrg(toCachedOrg(row))
}

export async function insertOrganization(executor: Executor, row: typeof organizations.$inferInsert): Promise<OrganizationRow> {
  const [inserted] = await executor.insert(organizations).values(row).returning()
  return inserted!
}

export async function findOrganization(executor: Executor, orgId: string): Promise<OrganizationRow | undefined> {
  const [row] = await executor.select().from(organizations).where(eq(organizations.id, orgId))
  return row
}

/** Organizations in id order (their creation order), those after `after` when given, at most `limit`. */
export async function listOrganizations(executor: Executor, page: { after?: string; limit: number }): Promise<OrganizationRow[]> {
  const query = executor.select().from(organizations)
  return (page.after === undefined ? query : query.where(gt(organizations.id, page.after))).orderBy(asc(organizations.id)).limit(page.limit)
}

export async function updateOrganization(
  executor: Executor,
  orgId: string,
  changes: Partial<typeof organizations.$inferInsert>,
): Promise<OrganizationRow | undefined> {
  const [row] = await executor.update(organizations).set(changes).where(eq(organizations.id, orgId)).returning()
  return row
}

/** Sets the limit and raises its version in the same update (see `KeyCache.upsertOrg`). */
export async function updateRateLimit(executor: Executor, orgId: string, rateLimitPerMinute: number | null): Promise<OrganizationRow | undefined> {
  const [row] = await executor
    .update(organizations)
    .set({ rateLimitPerMinute, limitsVersion: sql`${organizations.limitsVersion} + 1` })
    .where(eq(organizations.id, orgId))
    .returning()
  return row
}

export async function approvalThresholds(executor: Executor, orgId: string): Promise<Map<string, bigint>> {
  const rows = await executor.select().from(withdrawalApprovalThresholds).where(eq(withdrawalApprovalThresholds.orgId, orgId))
  return new Map(rows.map((row) => [row.asset, row.threshold]))
}

export async function setApprovalThreshold(executor: Executor, orgId: string, asset: string, threshold: bigint | null, now: Date): Promise<void> {
  if (threshold === null) {
    await executor.delete(withdrawalApprovalThresholds).where(and(eq(withdrawalApprovalThresholds.orgId, orgId), eq(withdrawalApprovalThresholds.asset, asset)))
    return
  }
  await executor
    .insert(withdrawalApprovalThresholds)
    .values({ orgId, asset, threshold, updatedAt: now })
    .onConflictDoUpdate({ target: [withdrawalApprovalThresholds.orgId, withdrawalApprovalThresholds.asset], set: { threshold, updatedAt: now } })
}

export async function insertKey(executor: Executor, row: typeof apiKeys.$inferInsert): Promise<ApiKeyRow> {
  const [inserted] = await executor.insert(apiKeys).values(row).returning()
  return inserted!
}

export async function findKey(executor: Executor, keyId: string): Promise<ApiKeyRow | undefined> {
  const [row] = await executor.select().from(apiKeys).where(eq(apiKeys.id, keyId))
  return row
}

export async function listKeys(executor: Executor, orgId: string): Promise<ApiKeyRow[]> {
  return executor.select().from(apiKeys).where(eq(apiKeys.orgId, orgId)).orderBy(asc(apiKeys.id))
}

/** The keys of several organizations in one query, each organization's in id order. */
export async function listKeysOf(executor: Executor, orgIds: string[]): Promise<ApiKeyRow[]> {
  if (orgIds.length === 0) return []
  return executor.select().from(apiKeys).where(inArray(apiKeys.orgId, orgIds)).orderBy(asc(apiKeys.orgId), asc(apiKeys.id))
}

export async function updateKey(
  executor: Executor,
  keyId: string,
  changes: Partial<typeof apiKeys.$inferInsert>,
): Promise<ApiKeyRow | undefined> {
  const [row] = await executor.update(apiKeys).set(changes).where(eq(apiKeys.id, keyId)).returning()
  return row
}

/** Gives an active key its rotation expiry; answers nothing when it is no longer active. */
export async function claimKeyForRotation(
  executor: Executor,
  keyId: string,
  expiresAt: Date,
  replacedByKeyId: string,
): Promise<ApiKeyRow | undefined> {
  const [row] = await executor
    .update(apiKeys)
    .set({ expiresAt, replacedByKeyId })
    .where(and(eq(apiKeys.id, keyId), isNull(apiKeys.expiresAt), isNull(apiKeys.revokedAt)))
    .returning()
  return row
}
