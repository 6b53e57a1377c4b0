import { notify, type Database, type Executor } from '../../../db/client.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { ASSETS, requireAsset } from '../../lib/assets.ts'
import { randomToken, sha256Hex } from '../../lib/hash.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { CHANGE_CHANNEL, type ChangeNotice } from '../../platform/changes.ts'
import type { Clock } from '../clock/clock.ts'
import { DEFAULT_KEY_RATE_LIMIT, KEY_PREFIXES, type KeyCache, type KeyType } from '../../platform/key-cache.ts'
import type { IssuedKeyView, KeySummaryView, OnboardingItem, OrganizationView, WithdrawalApprovalView } from './model.ts'
import { ONBOARDING_ITEMS } from './model.ts'
import * as repo from './repo.ts'

/** What the organizations services work with: the database, this process's key cache, the clocks. */
export interface OrgsContext {
  db: Database
  /** Changed before an answer leaves, so the next request here already sees the change. */
  keys: KeyCache
  clock: Clock
}

export const DEFAULT_ROTATION_OVERLAP_SECONDS = 24 * 3600
/** Withdrawals above this amount (in the asset's whole units) wait for a second key unless an operator sets another threshold. */
export const DEFAULT_WITHDRAWAL_APPROVAL_THRESHOLD = '10000'

type Environment = 'sandbox' | 'production'

async function announce(context: OrgsContext, notice: ChangeNotice): Promise<void> {
  await notify(context.db, CHANGE_CHANNEL, JSON.stringify(notice))
}

function keyStatus(row: repo.ApiKeyRow, nowMs: number): KeySummaryView['status'] {
  if (row.revokedAt !== null) return 'revoked'
  if (row.expiresAt !== null) return row.expiresAt.getTime() <= nowMs ? 'expired' : 'expiring'
  return 'active'
}

export function toKeySummary(row: repo.ApiKeyRow, nowMs: number): KeySummaryView {
  return {
    id: row.id,
    type: row.type,
    environment: row.environment,
    lastFour: row.lastFour,
    status: keyStatus(row, nowMs),
    createdAt: row.createdAt.toISOString(),
    expiresAt: row.expiresAt?.toISOString() ?? null,
    revokedAt: row.revokedAt?.toISOString() ?? null,
    replacedByKeyId: row.replacedByKeyId,
  }
}

function assertKeyAllowed(org: repo.OrganizationRow, type: KeyType, environment: Environment): void {
  if (type === 'test' && environment !== 'sandbox') {
    throw new ApiError('invalid_request', 'Test keys exist only in sandbox', { field: 'environment' })
  }
  if (type === 'secret' && environment === 'sandbox') {
    throw new ApiError('invalid_request', 'In sandbox the secret-level key is the test key (svc_test_)', { field: 'type' })
  }
  if (environment === 'production' && org.signedOffAt === null) {
    throw new ApiError('conflict', 'Production keys are issued only after the onboarding checklist is signed off', {
      field: 'environment',
    })
  }
}

/** Writes a new key on the caller's transaction; the caller publishes it after commit. */
async function insertNewKey(
  executor: Executor,
  orgId: string,
  type: KeyType,
  environment: Environment,
): Promise<{ row: repo.ApiKeyRow; issued: IssuedKeyView }> {
  const secret = `${KEY_PREFIXES[type]}${randomToken(32)}`
  const row = await repo.insertKey(executor, {
    id: newId('key'),
    orgId,
    type,
    environment,
    keyHash: sha256Hex(secret),
    lastFour: secret.slice(-4),
  })
  return {
    row,
    issued: { id: row.id, type: row.type, environment: row.environment, key: secret, createdAt: row.createdAt.toISOString() },
  }
}

/** After commit: this instance's cache first (so the answer is already true here), then the others. */
async function publishKeys(context: OrgsContext, rows: repo.ApiKeyRow[]): Promise<void> {
  for (const row of rows) context.keys.upsertKey(repo.toCachedKey(row))
  for (const row of rows) await announce(context, { kind: 'key', id: row.id })
}

export async function createOrganization(context: OrgsContext, name: string) {
  // The organization and its onboarding keys exist together or not at all.
  const { org, test, publishable } = await context.db.transaction(async (tx) => {
    const org = await repo.insertOrganization(tx, {
      id: newId('org'),
      name,
      onboardingChecklist: Object.fromEntries(ONBOARDING_ITEMS.map((item) => [item, false])),
    })
    const test = await insertNewKey(tx, org.id, 'test', 'sandbox')
    const publishable = await insertNewKey(tx, org.id, 'publishable', 'sandbox')
    return { org, test, publishable }
  })
  context.keys.upsertOrg(repo.toCachedOrg(org))
  // Other instances learn of the organization now, not at their next restart.
  await announce(context, { kind: 'org', id: org.id })
  await publishKeys(context, [test.row, publishable.row])
  return { id: org.id, name: org.name, keys: [test.issued, publishable.issued] }
}

async function requireOrganization(context: OrgsContext, orgId: string): Promise<repo.OrganizationRow> {
  const org = await repo.findOrganization(context.db, orgId)
  if (!org) throw notFound('organization')
  return org
}

export async function describeOrganization(context: OrgsContext, orgId: string): Promise<OrganizationView> {
  const org = await requireOrganization(context, orgId)
  return toOrganizationView(org, await repo.listKeys(context.db, orgId), context.clock.wallNowMs())
}

function toOrganizationView(org: repo.OrganizationRow, keys: repo.ApiKeyRow[], nowMs: number): OrganizationView {
  return {
    id: org.id,
    name: org.name,
    rateLimitPerMinute: org.rateLimitPerMinute ?? DEFAULT_KEY_RATE_LIMIT,
    onboarding: {
      checklist: org.onboardingChecklist,
      signedOffAt: org.signedOffAt?.toISOString() ?? null,
      signedOffBy: org.signedOffBy,
    },
    keys: keys.map((row) => toKeySummary(row, nowMs)),
    createdAt: org.createdAt.toISOString(),
  }
}

/**
 * A page of organizations in creation order, each with its keys: two queries whatever the page's
 * size. Never the whole table at once: read whole, with two queries per organization all started
 * together, 3,000 organizations took 1.1 to 1.4 s and held every other request on the instance (an
 * authorization included) up to 233 ms, while its queries filled the connection pool.
 */
export async function listOrganizations(context: OrgsContext, query: { after?: string; limit?: number }): Promise<{ orgs: OrganizationView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listOrganizations(context.db, { after: query.after, limit: limit + 1 })
  const keys = await repo.listKeysOf(context.db, rows.slice(0, limit).map((org) => org.id))
  const keysByOrg = Map.groupBy(keys, (key) => key.orgId)
  const nowMs = context.clock.wallNowMs()
  const listed = onePage(rows, limit, (org) => toOrganizationView(org, keysByOrg.get(org.id) ?? [], nowMs))
  return { orgs: listed.items, hasMore: listed.hasMore }
}

export async function issueOrganizationKey(context: OrgsContext, orgId: string, type: KeyType, environment: Environment) {
  const org = await requireOrganization(context, orgId)
  assertKeyAllowed(org, type, environment)
  const key = await insertNewKey(context.db, orgId, type, environment)
  await publishKeys(context, [key.row])
  return key.issued
}

async function requireKey(context: OrgsContext, keyId: string): Promise<repo.ApiKeyRow> {
  const key = await repo.findKey(context.db, keyId)
  if (!key) throw notFound('key')
  return key
}

/**
 * Rotation issues a new key of the same type and environment and gives the old one an expiry at
 * the end of the overlap window, after which the key cache refuses it.
 */
export async function rotateKey(context: OrgsContext, keyId: string, overlapSeconds = DEFAULT_ROTATION_OVERLAP_SECONDS) {
  const old = await requireKey(context, keyId)
  const nowMs = context.clock.wallNowMs()
  const status = keyStatus(old, nowMs)
  if (status !== 'active') throw new ApiError('conflict', `Only an active key can be rotated; this key is ${status}`)
  // The old key is claimed with a conditional update in the same transaction as its replacement,
  // so two concurrent rotations cannot both succeed and leave two live replacements.
  const rotated = await context.db.transaction(async (tx) => {
    const replacement = await insertNewKey(tx, old.orgId, old.type, old.environment)
    const updated = await repo.claimKeyForRotation(tx, old.id, new Date(nowMs + overlapSeconds * 1000), replacement.row.id)
    if (!updated) throw new ApiError('conflict', 'This key was rotated or revoked meanwhile')
    return { replacement, updated }
  })
  const { replacement, updated } = rotated
  await publishKeys(context, [replacement.row, updated])
  return { key: replacement.issued, previous: toKeySummary(updated, nowMs) }
}

export async function revokeKey(context: OrgsContext, keyId: string): Promise<KeySummaryView> {
  const key = await requireKey(context, keyId)
  const nowMs = context.clock.wallNowMs()
  const updated = key.revokedAt === null ? await repo.updateKey(context.db, keyId, { revokedAt: new Date(nowMs) }) : key
  // The cache changes before the answer leaves, so the very next request with this key fails.
  context.keys.upsertKey(repo.toCachedKey(updated!))
  await announce(context, { kind: 'key', id: keyId })
  return toKeySummary(updated!, nowMs)
}

export async function updateChecklist(
  context: OrgsContext,
  orgId: string,
  items: Partial<Record<OnboardingItem, boolean>>,
): Promise<OrganizationView> {
  const org = await requireOrganization(context, orgId)
  if (org.signedOffAt !== null) throw new ApiError('conflict', 'Onboarding is already signed off')
  await repo.updateOrganization(context.db, orgId, { onboardingChecklist: { ...org.onboardingChecklist, ...items } })
  return describeOrganization(context, orgId)
}

export async function signOff(context: OrgsContext, orgId: string, signedOffBy: string): Promise<OrganizationView> {
  const org = await requireOrganization(context, orgId)
  if (org.signedOffAt !== null) throw new ApiError('conflict', 'Onboarding is already signed off')
  const open = ONBOARDING_ITEMS.filter((item) => org.onboardingChecklist[item] !== true)
  if (open.length > 0) {
    throw new ApiError('conflict', `Checklist items not done: ${open.join(', ')}`, { field: `checklist.${open[0]}` })
  }
  await repo.updateOrganization(context.db, orgId, { signedOffAt: new Date(context.clock.wallNowMs()), signedOffBy })
  return describeOrganization(context, orgId)
}

export async function setRateLimit(context: OrgsContext, orgId: string, rateLimitPerMinute: number | null): Promise<OrganizationView> {
  const updated = await repo.updateRateLimit(context.db, orgId, rateLimitPerMinute)
  if (updated === undefined) throw notFound('organization')
  context.keys.upsertOrg(repo.toCachedOrg(updated))
  await announce(context, { kind: 'org', id: orgId })
  return describeOrganization(context, orgId)
}

/** The amount above which a withdrawal of this asset waits in pending_approval for a second key. */
export async function withdrawalApprovalThresholdMinor(context: OrgsContext, orgId: string, asset: string): Promise<bigint> {
  const own = (await repo.approvalThresholds(context.db, orgId)).get(asset)
  return own ?? parseAmount(DEFAULT_WITHDRAWAL_APPROVAL_THRESHOLD, requireAsset(asset).decimals, 'threshold')
}

export async function getWithdrawalApproval(context: OrgsContext, orgId: string): Promise<WithdrawalApprovalView> {
  await requireOrganization(context, orgId)
  const own = await repo.approvalThresholds(context.db, orgId)
  return {
    orgId,
    thresholds: ASSETS.map((info) => {
      const value = own.get(info.asset)
      const threshold = value ?? parseAmount(DEFAULT_WITHDRAWAL_APPROVAL_THRESHOLD, info.decimals, 'threshold')
      return { asset: info.asset, threshold: formatAmount(threshold, info.decimals), isDefault: value === undefined }
    }),
  }
}

/** Sets (or with null, restores to the default) an organization's approval threshold for one asset. */
export async function setWithdrawalApproval(context: OrgsContext, orgId: string, asset: string, threshold: string | null): Promise<WithdrawalApprovalView> {
  const info = requireAsset(asset)
  const minor = threshold === null ? null : parseAmount(threshold, info.decimals, 'threshold', { allowZero: true })
  await requireOrganization(context, orgId)
  await repo.setApprovalThreshold(context.db, orgId, info.asset, minor, new Date(context.clock.wallNowMs()))
  return getWithdrawalApproval(context, orgId)
}
