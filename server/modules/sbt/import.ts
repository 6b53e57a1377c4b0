import { Type as t, type Static } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { sql } from 'drizzle-orm'
import type { Database, Executor } from '../../../db/client.ts'
import { sbtCampaigns, sbtClaims, sbtClicks, sbtCredentialGroups, sbtCredentialResults, sbtCredentials, sbtImports, sbtRewards, sbtUsers } from '../../../db/schema/index.ts'
import { invalid } from '../../lib/errors.ts'
import { sha256Hex } from '../../lib/hash.ts'
import { LABEL_TYPE_MAX } from './registry.ts'
import { SbtError } from './envelope.ts'
import { normalizeSuiAddress } from './sui.ts'
import { paramsProblem } from './verifiers.ts'
import { checkWebhookUrl, UrlRefused, type UrlPolicy } from '../../lib/url-policy.ts'

/** Items one import may carry in all; a larger move is split into several imports. */
export const IMPORT_ITEMS_MAX = 200_000

const Id = t.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9_.:-]+$' })
/** Campaign ids appear in referral links, encoded there: any printable text. */
const CampaignId = t.String({ minLength: 1, maxLength: 128, pattern: '^[^\\u0000-\\u001f\\u007f]+$' })
const Address = t.String({ minLength: 1, maxLength: 70 })
const Iso = t.String({ format: 'date-time', minLength: 10, maxLength: 40 })

export const ImportCampaign = t.Object({ id: CampaignId, name: t.String({ minLength: 1, maxLength: 200 }), isDefault: t.Optional(t.Boolean()) }, { additionalProperties: false })
export const ImportGroup = t.Object({ id: Id, campaignId: CampaignId, name: t.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false })
export const ImportCredential = t.Object(
  {
    id: Id,
    groupId: Id,
    name: t.String({ minLength: 1, maxLength: 200 }),
    labelType: t.Integer({ minimum: 1, maximum: LABEL_TYPE_MAX }),
    params: t.Optional(t.Record(t.String(), t.Unknown())),
  },
  { additionalProperties: false },
)
export const ImportReward = t.Object(
  {
    sbtId: t.Integer({ minimum: 1, maximum: 2_147_483_647 }),
    kind: t.Union([t.Literal('social'), t.Literal('referral'), t.Literal('lockdrop')]),
    groupId: Id,
    level: t.Integer({ minimum: 1, maximum: 10 }),
    title: t.String({ minLength: 1, maxLength: 200 }),
    taskName: t.String({ minLength: 1, maxLength: 500 }),
    points: t.Integer({ minimum: 0, maximum: 2_147_483_647 }),
    invitesRequired: t.Optional(t.Integer({ minimum: 1, maximum: 1_000_000 })),
    usdRequired: t.Optional(t.Number({ minimum: 0, maximum: 1e12 })),
  },
  { additionalProperties: false },
)
export const ImportUser = t.Object(
  {
    suiAddress: Address,
    /** Codes moved over from another system may hold any printable text; referral links encode them. */
    inviteCode: t.String({ minLength: 1, maxLength: 64, pattern: '^[^\\u0000-\\u001f\\u007f]+$' }),
    invitedBy: t.Optional(Address),
    invitedAt: t.Optional(Iso),
    createdAt: t.Optional(Iso),
    bindings: t.Optional(
      t.Object(
        { ton: t.Optional(t.String({ maxLength: 100 })), evm: t.Optional(t.String({ pattern: '^0x[0-9a-fA-F]{40}$' })), sui: t.Optional(t.String({ maxLength: 70 })), bsc: t.Optional(t.String({ pattern: '^0x[0-9a-fA-F]{40}$' })), x: t.Optional(t.String({ maxLength: 100 })), discord: t.Optional(t.String({ maxLength: 100 })) },
        { additionalProperties: false },
      ),
    ),
    score: t.Optional(t.Integer({ minimum: 0, maximum: 2_147_483_647 })),
    streakDays: t.Optional(t.Integer({ minimum: 0, maximum: 100_000 })),
  },
  { additionalProperties: false },
)
export const ImportResult = t.Object({ suiAddress: Address, credentialId: Id, status: t.Integer({ minimum: 0, maximum: 1 }) }, { additionalProperties: false })
export const ImportClick = t.Object({ suiAddress: Address, credentialId: Id, createdAt: t.Optional(Iso) }, { additionalProperties: false })
export const ImportClaim = t.Object({ suiAddress: Address, sbtId: t.Integer({ minimum: 1, maximum: 2_147_483_647 }), claimType: t.Integer({ minimum: 2, maximum: 5 }) }, { additionalProperties: false })

export const ImportDocument = t.Object(
  {
    campaigns: t.Optional(t.Array(ImportCampaign)),
    groups: t.Optional(t.Array(ImportGroup)),
    credentials: t.Optional(t.Array(ImportCredential)),
    rewards: t.Optional(t.Array(ImportReward)),
    users: t.Optional(t.Array(ImportUser)),
    results: t.Optional(t.Array(ImportResult)),
    clicks: t.Optional(t.Array(ImportClick)),
    claims: t.Optional(t.Array(ImportClaim)),
  },
  { additionalProperties: false, title: 'SbtImportDocument' },
)
export type ImportDocumentValue = Static<typeof ImportDocument>

/** NDJSON lines name their kind in `type`; the rest of the line is the item. */
const NDJSON_KINDS: Record<string, keyof ImportDocumentValue> = {
  campaign: 'campaigns',
  group: 'groups',
  credential: 'credentials',
  reward: 'rewards',
  user: 'users',
  result: 'results',
  click: 'clicks',
  claim: 'claims',
}

const documentCheck = TypeCompiler.Compile(ImportDocument)

export interface ImportSummary {
  campaigns: number
  groups: number
  credentials: number
  rewards: number
  users: number
  results: number
  clicks: number
  claims: number
  /** True when this very document was imported before: nothing was written again. */
  repeated: boolean
}

/** Turns NDJSON text into the document shape, naming the line of any problem. */
export function documentFromNdjson(text: string): ImportDocumentValue {
  const document: Record<string, unknown[]> = {}
  const lines = text.split('\n')
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]!.trim()
    if (line === '') continue
    let item: Record<string, unknown>
    try {
      item = JSON.parse(line)
    } catch {
      throw invalid(`line ${index + 1}`, `line ${index + 1} is not JSON`)
    }
    const kind = typeof item?.type === 'string' ? NDJSON_KINDS[item.type] : undefined
    if (kind === undefined) throw invalid(`line ${index + 1}.type`, `line ${index + 1}: type must be one of ${Object.keys(NDJSON_KINDS).join(', ')}`)
    const { type: _type, ...rest } = item
    ;(document[kind] ??= []).push(rest)
  }
  return document as ImportDocumentValue
}

function checkShape(document: unknown): ImportDocumentValue {
  if (!documentCheck.Check(document)) {
    const first = documentCheck.Errors(document).First()
    const field = (first?.path ?? '').replace(/^\//, '').replace(/\/(\d+)/g, '[$1]').replaceAll('/', '.') || 'body'
    throw invalid(field, `${field}: ${first?.message ?? 'invalid'}`)
  }
  const value = document as ImportDocumentValue
  const total = Object.values(value).reduce((sum, items) => sum + (items?.length ?? 0), 0)
  if (total > IMPORT_ITEMS_MAX) throw invalid('body', `an import carries at most ${IMPORT_ITEMS_MAX} items; split it`)
  return value
}

function address(raw: string, field: string): string {
  try {
    return normalizeSuiAddress(raw)
  } catch (error) {
    if (error instanceof SbtError) throw invalid(field, `${field}: ${error.message}`)
    throw error
  }
}

function rowsOf<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

async function existing(executor: Executor, table: string, column: string, values: Iterable<string | number>): Promise<Set<string>> {
  const list = [...new Set(values)].map(String)
  if (list.length === 0) return new Set()
  const rows = rowsOf<{ value: string }>(await executor.execute(sql`select ${sql.identifier(column)}::text as value from ${sql.identifier(table)} where ${sql.identifier(column)}::text in (${sql.join(list.map((value) => sql`${value}`), sql`, `)})`))
  return new Set(rows.map((row) => row.value))
}

function chunks<T>(items: T[], size = 1000): T[][] {
  const out: T[][] = []
  for (let index = 0; index < items.length; index += size) out.push(items.slice(index, index + size))
  return out
}

/** Checks every rule a schema cannot express: parameters per labelType, references, per-kind fields. */
async function checkRules(document: ImportDocumentValue, policy: UrlPolicy): Promise<void> {
  for (const [index, credential] of (document.credentials ?? []).entries()) {
    const problem = paramsProblem(credential.labelType, credential.params ?? {})
    if (problem) throw invalid(`credentials[${index}].params`, `credentials[${index}] (${credential.id}): ${problem}`)
    if (typeof credential.params?.url === 'string') {
      try {
        await checkWebhookUrl(credential.params.url, policy)
      } catch (error) {
        if (error instanceof UrlRefused) throw invalid(`credentials[${index}].params.url`, `credentials[${index}].params.url: ${error.message}`)
        throw error
      }
    }
  }
  for (const [index, reward] of (document.rewards ?? []).entries()) {
    if (reward.kind === 'referral' && reward.invitesRequired === undefined) throw invalid(`rewards[${index}].invitesRequired`, `rewards[${index}]: a referral SBT needs invitesRequired`)
    if (reward.kind === 'lockdrop' && reward.usdRequired === undefined) throw invalid(`rewards[${index}].usdRequired`, `rewards[${index}]: a lockdrop SBT needs usdRequired`)
    if (reward.kind !== 'referral' && reward.invitesRequired !== undefined) throw invalid(`rewards[${index}].invitesRequired`, `rewards[${index}]: only referral SBTs have invitesRequired`)
    if (reward.kind !== 'lockdrop' && reward.usdRequired !== undefined) throw invalid(`rewards[${index}].usdRequired`, `rewards[${index}]: only lockdrop SBTs have usdRequired`)
  }
  if ((document.campaigns ?? []).filter((campaign) => campaign.isDefault).length > 1) throw invalid('campaigns', 'at most one campaign can be the default')
}

/**
 * Applies an import: validated whole first, then written in one transaction (all or nothing).
 * Campaigns, groups, credentials, rewards and users are upserted by their ids (a user by address);
 * claim records by user and SBT; results and clicks are appended. The same document imported
 * again is recognized by its hash and changes nothing.
 */
export async function applyImport(db: Database, input: unknown, policy: UrlPolicy): Promise<ImportSummary> {
  const document = checkShape(input)
  await checkRules(document, policy)
  const documentHash = sha256Hex(JSON.stringify(document))
  return db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(72072)`)
    const [previous] = rowsOf<{ summary: Omit<ImportSummary, 'repeated'> }>(await tx.execute(sql`select summary from sbt_imports where document_hash = ${documentHash}`))
    if (previous) return { ...previous.summary, repeated: true }
    const campaigns = document.campaigns ?? []
    const groups = document.groups ?? []
    const credentials = document.credentials ?? []
    const rewards = document.rewards ?? []
    const users = (document.users ?? []).map((user, index) => ({ ...user, suiAddress: address(user.suiAddress, `users[${index}].suiAddress`), invitedBy: user.invitedBy === undefined ? undefined : address(user.invitedBy, `users[${index}].invitedBy`) }))

    const campaignIds = new Set([...campaigns.map((campaign) => campaign.id), ...(await existing(tx, 'sbt_campaigns', 'id', groups.map((group) => group.campaignId)))])
    for (const [index, group] of groups.entries()) if (!campaignIds.has(group.campaignId)) throw invalid(`groups[${index}].campaignId`, `groups[${index}]: no campaign ${group.campaignId}`)
    const groupIds = new Set([...groups.map((group) => group.id), ...(await existing(tx, 'sbt_credential_groups', 'id', [...credentials.map((item) => item.groupId), ...rewards.map((item) => item.groupId)]))])
    for (const [index, credential] of credentials.entries()) if (!groupIds.has(credential.groupId)) throw invalid(`credentials[${index}].groupId`, `credentials[${index}]: no group ${credential.groupId}`)
    for (const [index, reward] of rewards.entries()) if (!groupIds.has(reward.groupId)) throw invalid(`rewards[${index}].groupId`, `rewards[${index}]: no group ${reward.groupId}`)

    if (campaigns.some((campaign) => campaign.isDefault)) await tx.execute(sql`update sbt_campaigns set is_default = 0 where is_default = 1`)
    for (const part of chunks(campaigns)) {
      await tx.insert(sbtCampaigns).values(part.map((item) => ({ id: item.id, name: item.name, isDefault: item.isDefault ? 1 : 0 }))).onConflictDoUpdate({ target: sbtCampaigns.id, set: { name: sql`excluded.name`, isDefault: sql`excluded.is_default` } })
    }
    for (const part of chunks(groups)) {
      await tx.insert(sbtCredentialGroups).values(part).onConflictDoUpdate({ target: sbtCredentialGroups.id, set: { campaignId: sql`excluded.campaign_id`, name: sql`excluded.name` } })
    }
    for (const part of chunks(credentials)) {
      await tx
        .insert(sbtCredentials)
        .values(part.map((item) => ({ ...item, params: item.params ?? {} })))
        .onConflictDoUpdate({ target: sbtCredentials.id, set: { groupId: sql`excluded.group_id`, name: sql`excluded.name`, labelType: sql`excluded.label_type`, params: sql`excluded.params` } })
    }
    for (const part of chunks(rewards)) {
      await tx
        .insert(sbtRewards)
        .values(part.map((item) => ({ ...item, invitesRequired: item.invitesRequired ?? null, usdRequired: item.usdRequired === undefined ? null : String(item.usdRequired) })))
        .onConflictDoUpdate({
          target: sbtRewards.sbtId,
          set: { kind: sql`excluded.kind`, groupId: sql`excluded.group_id`, level: sql`excluded.level`, title: sql`excluded.title`, taskName: sql`excluded.task_name`, points: sql`excluded.points`, invitesRequired: sql`excluded.invites_required`, usdRequired: sql`excluded.usd_required` },
        })
    }
    for (const part of chunks(users)) {
      await tx
        .insert(sbtUsers)
        .values(part.map((user) => ({ suiAddress: user.suiAddress, inviteCode: user.inviteCode, bindings: user.bindings ?? {}, score: user.score ?? 0, streakDays: user.streakDays ?? 0, ...(user.createdAt ? { createdAt: new Date(user.createdAt) } : {}) })))
        .onConflictDoUpdate({ target: sbtUsers.suiAddress, set: { inviteCode: sql`excluded.invite_code`, bindings: sql`excluded.bindings`, score: sql`excluded.score`, streakDays: sql`excluded.streak_days` } })
    }
    const referenced = [
      ...users.flatMap((user) => (user.invitedBy ? [user.invitedBy, user.suiAddress] : [])),
      ...(document.results ?? []).map((item) => item.suiAddress),
      ...(document.clicks ?? []).map((item) => item.suiAddress),
      ...(document.claims ?? []).map((item) => item.suiAddress),
    ].map((raw) => address(raw, 'suiAddress'))
    const userIds = new Map<string, number>()
    for (const part of chunks([...new Set(referenced)], 5000)) {
      const rows = rowsOf<{ id: string | number; sui_address: string }>(await tx.execute(sql`select id, sui_address from sbt_users where sui_address in (${sql.join(part.map((value) => sql`${value}`), sql`, `)})`))
      for (const row of rows) userIds.set(row.sui_address, Number(row.id))
    }
    const userId = (raw: string, field: string): number => {
      const id = userIds.get(address(raw, field))
      if (id === undefined) throw invalid(field, `${field}: no user ${raw} (import the user first, or in the same document)`)
      return id
    }
    for (const [index, user] of users.entries()) {
      if (user.invitedBy === undefined) continue
      if (user.invitedBy === user.suiAddress) throw invalid(`users[${index}].invitedBy`, `users[${index}]: a user cannot invite themself`)
      const inviter = userId(user.invitedBy, `users[${index}].invitedBy`)
      await tx.execute(sql`update sbt_users set invited_by = ${inviter}, invited_at = ${user.invitedAt ?? user.createdAt ?? null} where sui_address = ${user.suiAddress}`)
    }
    const credentialIds = new Set([...credentials.map((item) => item.id), ...(await existing(tx, 'sbt_credentials', 'id', [...(document.results ?? []), ...(document.clicks ?? [])].map((item) => item.credentialId)))])
    const results = (document.results ?? []).map((item, index) => {
      if (!credentialIds.has(item.credentialId)) throw invalid(`results[${index}].credentialId`, `results[${index}]: no credential ${item.credentialId}`)
      return { userId: userId(item.suiAddress, `results[${index}].suiAddress`), credentialId: item.credentialId, status: item.status }
    })
    for (const part of chunks(results)) await tx.insert(sbtCredentialResults).values(part)
    const clicks = (document.clicks ?? []).map((item, index) => {
      if (!credentialIds.has(item.credentialId)) throw invalid(`clicks[${index}].credentialId`, `clicks[${index}]: no credential ${item.credentialId}`)
      return { userId: userId(item.suiAddress, `clicks[${index}].suiAddress`), credentialId: item.credentialId, ...(item.createdAt ? { createdAt: new Date(item.createdAt) } : {}) }
    })
    for (const part of chunks(clicks)) await tx.insert(sbtClicks).values(part)
    const sbtIds = new Set([...rewards.map((item) => String(item.sbtId)), ...(await existing(tx, 'sbt_rewards', 'sbt_id', (document.claims ?? []).map((item) => item.sbtId)))])
    // The last record of a user and SBT in the document wins, as it would imported one by one.
    const claims = new Map<string, { userId: number; sbtId: number; claimType: number }>()
    for (const [index, claim] of (document.claims ?? []).entries()) {
      if (!sbtIds.has(String(claim.sbtId))) throw invalid(`claims[${index}].sbtId`, `claims[${index}]: no SBT reward ${claim.sbtId}`)
      const id = userId(claim.suiAddress, `claims[${index}].suiAddress`)
      claims.set(`${id}:${claim.sbtId}`, { userId: id, sbtId: claim.sbtId, claimType: claim.claimType })
    }
    for (const part of chunks([...claims.values()])) {
      await tx.insert(sbtClaims).values(part).onConflictDoUpdate({ target: [sbtClaims.userId, sbtClaims.sbtId], set: { claimType: sql`excluded.claim_type`, updatedAt: sql`now()` } })
    }
    const summary = { campaigns: campaigns.length, groups: groups.length, credentials: credentials.length, rewards: rewards.length, users: users.length, results: results.length, clicks: clicks.length, claims: (document.claims ?? []).length }
    await tx.insert(sbtImports).values({ documentHash, summary })
    return { ...summary, repeated: false }
  })
}


