import { notify, type Executor } from '../../../db/client.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { ASSETS, requireAsset } from '../../lib/assets.ts'
import { randomToken, sha256Hex } from '../../lib/hash.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { CHANGE_CHANNEL, type ChangeNotice } from '../../platform/changes.ts'
import type { Runtime } from '../../runtime.ts'
import { DEFAULT_KEY_RATE_LIMIT, KEY_PREFIXES, type KeyType } from '../../platform/key-cache.ts'
import type { IssuedKeyView, KeySummaryView, OnboardingItem, OrganizationView, WithdrawalApprovalView } from './model.ts'
import { ONBOARDING_ITEMS } from './model.ts'
import * as repo from './repo.ts'

export const DEFAULT_ROTATION_OVERLAP_SECONDS = 24 * 3600
/** Withdrawals above this amount (in the asset's whole units) wait for a second key unless an operator sets another threshold. */
export const DEFAULT_WITHDRAWAL_APPROVAL_THRESHOLD = '10000'

type Environment = 'sandbox' | 'production'

async function announce(runtime: Runtime, notice: ChangeNotice): Promise<void> {
  await notify(runtime.db, CHANGE_CHANNEL, JSON.stringify(notice))
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
async function publishKeys(runtime: Runtime, rows: repo.ApiKeyRow[]): Promise<void> {
  for (const row of rows) runtime.keys.upsertKey(repo.toCachedKey(row))
  for (const row of rows) await announce(runtime, { kind: 'key', id: row.id })
}

export async function createOrganization(runtime: Runtime, name: string) {
  // The organization and its onboarding keys exist together or not at all.
  const { org, test, publishable } = await runtime.db.transaction(async (tx) => {
    const org = await repo.insertOrganization(tx, {
      id: newId('org'),
      name,
      onboardingChecklist: Object.fromEntries(ONBOARDING_ITEMS.map((item) => [item, false])),
    })
    const test = await insertNewKey(tx, org.id, 'test', 'sandbox')
    const publishable = await insertNewKey(tx, org.id, 'publishable', 'sandbox')
    return { org, test, publishable }
  })
  runtime.keys.upsertOrg(repo.toCachedOrg(org))
  // Other instances learn of the organization now, not at their next restart.
  await announce(runtime, { kind: 'org', id: org.id })
  await publishKeys(runtime, [test.row, publishable.row])
  return { id: org.id, name: org.name, keys: [test.issued, publishable.issued] }
}

async function requireOrganization(runtime: Runtime, orgId: string): Promise<repo.OrganizationRow> {
  const org = await repo.findOrganization(runtime.db, orgId)
  if (!org) throw notFound('organization')
  return org
}

export async function describeOrganization(runtime: Runtime, orgId: string): Promise<OrganizationView> {
  const org = await requireOrganization(runtime, orgId)
  return toOrganizationView(org, await repo.listKeys(runtime.db, orgId), runtime.clock.wallNowMs())
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
export async function listOrganizations(runtime: Runtime, query: { after?: string; limit?: number }): Promise<{ orgs: OrganizationView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listOrganizations(runtime.db, { after: query.after, limit: limit + 1 })
  const keys = await repo.listKeysOf(runtime.db, rows.slice(0, limit).map((org) => org.id))
  const keysByOrg = Map.groupBy(keys, (key) => key.orgId)
  const nowMs = runtime.clock.wallNowMs()
  const listed = onePage(rows, limit, (org) => toOrganizationView(org, keysByOrg.get(org.id) ?? [], nowMs))
  return { orgs: listed.items, hasMore: listed.hasMore }
}

export async function issueOrganizationKey(runtime: Runtime, orgId: string, type: KeyType, environment: Environment) {
  const org = await requireOrganization(runtime, orgId)
  assertKeyAllowed(org, type, environment)
  const key = await insertNewKey(runtime.db, orgId, type, environment)
  await publishKeys(runtime, [key.row])
  return key.issued
}

async function requireKey(runtime: Runtime, keyId: string): Promise<repo.ApiKeyRow> {
  const key = await repo.findKey(runtime.db, keyId)
  if (!key) throw notFound('key')
  return key
}

/**
 * Rotation issues a new key of the same type and environment and gives the old one an expiry at
 * the end of the overlap window, after which the key cache refuses it.
 */
export async function rotateKey(runtime: Runtime, keyId: string, overlapSeconds = DEFAULT_ROTATION_OVERLAP_SECONDS) {
  const old = await requireKey(runtime, keyId)
  const nowMs = runtime.clock.wallNowMs()
  const status = keyStatus(old, nowMs)
  if (status !== 'active') throw new ApiError('conflict', `Only an active key can be rotated; this key is ${status}`)
  // The old key is claimed with a conditional update in the same transaction as its replacement,
  // so two concurrent rotations cannot both succeed and leave two live replacements.
  const rotated = await runtime.db.transaction(async (tx) => {
    const replacement = await insertNewKey(tx, old.orgId, old.type, old.environment)
    const updated = await repo.claimKeyForRotation(tx, old.id, new Date(nowMs + overlapSeconds * 1000), replacement.row.id)
    if (!updated) throw new ApiError('conflict', 'This key was rotated or revoked meanwhile')
    return { replacement, updated }
  })
  const { replacement, updated } = rotated
  await publishKeys(runtime, [replacement.row, updated])
  return { key: replacement.issued, previous: toKeySummary(updated, nowMs) }
}

export async function revokeKey(runtime: Runtime, keyId: string): Promise<KeySummaryView> {
  const key = await requireKey(runtime, keyId)
  const nowMs = runtime.clock.wallNowMs()
  const updated = key.revokedAt === null ? await repo.updateKey(runtime.db, keyId, { revokedAt: new Date(nowMs) }) : key
  // The cache changes before the answer leaves, so the very next request with this key fails.
  runtime.keys.upsertKey(repo.toCachedKey(updated!))
  await announce(runtime, { kind: 'key', id: keyId })
  return toKeySummary(updated!, nowMs)
}

export async function updateChecklist(
  runtime: Runtime,
  orgId: string,
  items: Partial<Record<OnboardingItem, boolean>>,
): Promise<OrganizationView> {
  const org = await requireOrganization(runtime, orgId)
  if (org.signedOffAt !== null) throw new ApiError('conflict', 'Onboarding is already signed off')
  await repo.updateOrganization(runtime.db, orgId, { onboardingChecklist: { ...org.onboardingChecklist, ...items } })
  return describeOrganization(runtime, orgId)
}

export async function signOff(runtime: Runtime, orgId: string, signedOffBy: string): Promise<OrganizationView> {
  const org = await requireOrganization(runtime, orgId)
  if (org.signedOffAt !== null) throw new ApiError('conflict', 'Onboarding is already signed off')
  const open = ONBOARDING_ITEMS.filter((item) => org.onboardingChecklist[item] !== true)
  if (open.length > 0) {
    throw new ApiError('conflict', `Checklist items not done: ${open.join(', ')}`, { field: `checklist.${open[0]}` })
  }
  await repo.updateOrganization(runtime.db, orgId, { signedOffAt: new Date(runtime.clock.wallNowMs()), signedOffBy })
  return describeOrganization(runtime, orgId)
}

export async function setRateLimit(runtime: Runtime, orgId: string, rateLimitPerMinute: number | null): Promise<OrganizationView> {
  const updated = await repo.updateRateLimit(runtime.db, orgId, rateLimitPerMinute)
  if (updated === undefined) throw notFound('organization')
  runtime.keys.upsertOrg(repo.toCachedOrg(updated))
  await announce(runtime, { kind: 'org', id: orgId })
  return describeOrganization(runtime, orgId)
}

/** The amount above which a withdrawal of this asset waits in pending_approval for a second key. */
export async function withdrawalApprovalThresholdMinor(runtime: Runtime, orgId: string, asset: string): Promise<bigint> {
  const own = (await repo.approvalThresholds(runtime.db, orgId)).get(asset)
  return own ?? parseAmount(DEFAULT_WITHDRAWAL_APPROVAL_THRESHOLD, requireAsset(asset).decimals, 'threshold')
}

export async function getWithdrawalApproval(runtime: Runtime, orgId: string): Promise<WithdrawalApprovalView> {
  await requireOrganization(runtime, orgId)
  const own = await repo.approvalThresholds(runtime.db, orgId)
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
export async function setWithdrawalApproval(runtime: Runtime, orgId: string, asset: string, threshold: string | null): Promise<WithdrawalApprovalView> {
  const info = requireAsset(asset)
  const minor = threshold === null ? null : parseAmount(threshold, info.decimals, 'threshold', { allowZero: true })
  await requireOrganization(runtime, orgId)
  await repo.setApprovalThreshold(runtime.db, orgId, info.asset, minor, new Date(runtime.clock.wallNowMs()))
  return getWithdrawalApproval(runtime, orgId)
}
