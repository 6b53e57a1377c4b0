import { sql, type SQL } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { SbtError } from './envelope.ts'
import { normalizeSuiAddress } from './sui.ts'

export const PAGE_DEFAULT = 1
export const PAGE_SIZE_DEFAULT = 10
export const PAGE_SIZE_MIN = 5
export const PAGE_SIZE_MAX = 20
/** The largest page number accepted; beyond it an offset would be meaningless anyway. */
export const PAGE_MAX = 1_000_000_000

export interface SocialItem {
  level: number
  sbtId: number
  title: string
  taskName: string
  points: number
}
export interface ReferralItem extends SocialItem {
  invitesRequired: number
  claimed: boolean
}
export interface LockdropItem extends SocialItem {
  usdRequired: number
}

export interface UserRecord {
  suiAddress: string
  claimedSocialSbts: SocialItem[]
  claimedReferralSbts: ReferralItem[]
  claimedLockdropSbts: LockdropItem[]
  totalRawPoints: number
  sbtCount: number
  referralLink: string
  invitees: Array<{ suiAddress: string; inviteDate: string }>
  inviteeCount: number
}

export interface PagedUser {
  suiAddress: string
  sbtCount: number
  totalRawPoints: number
  claimedSocialSbts: SocialItem[]
  claimedReferralSbts: ReferralItem[]
}

export interface PagedRecord {
  users: PagedUser[]
  pagination: { currentPage: number; pageSize: number; totalUsers: number; totalPages: number }
}

interface ClaimedRow {
  kind: 'social' | 'referral' | 'lockdrop'
  level: number
  sbt_id: number
  title: string
  task_name: string
  points: number
  invites_required: number | null
  usd_required: string | number | null
}

interface Grouped {
  social: SocialItem[]
  referral: ReferralItem[]
  lockdrop: LockdropItem[]
  points: number
  count: number
}

function emptyGroup(): Grouped {
  return { social: [], referral: [], lockdrop: [], points: 0, count: 0 }
}

/** Adds one claimed SBT to a user's lists; the totals are summed from the same rows, so they always agree. */
function addClaimed(group: Grouped, row: ClaimedRow): void {
  const base: SocialItem = { level: row.level, sbtId: row.sbt_id, title: row.title, taskName: row.task_name, points: row.points }
  if (row.kind === 'social') group.social.push(base)
  else if (row.kind === 'referral') group.referral.push({ ...base, invitesRequired: row.invites_required ?? 0, claimed: true })
  else group.lockdrop.push({ ...base, usdRequired: Number(row.usd_required ?? 0) })
  group.points += row.points
  group.count += 1
}

/** Only `claimType = 4` counts as claimed: eligible, minting and missed records are not holdings. */
const CLAIMED = 4

function rowsOf<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

/** Builds `base/native/incentive/<campaign>?code=<invite code>`, each part encoded. */
export function referralLinkOf(baseUrl: string, campaignId: string | undefined, inviteCode: string): string {
  if (campaignId === undefined) return ''
  const url = new URL(`${baseUrl.replace(/\/+$/, '')}/native/incentive/${encodeURIComponent(campaignId)}`)
  url.searchParams.set('code', inviteCode)
  return url.toString()
}

/** `page` and `pageSize` as the contract bounds them; anything else is refused, never clamped. */
export function parsePaging(pageRaw: string | null, pageSizeRaw: string | null): { page: number; pageSize: number } {
  const page = parseWhole(pageRaw, 'page', PAGE_DEFAULT)
  const pageSize = parseWhole(pageSizeRaw, 'pageSize', PAGE_SIZE_DEFAULT)
  if (page < 1 || page > PAGE_MAX) throw new SbtError('page_out_of_range', `page must be a whole number from 1 (got ${page})`)
  if (pageSize < PAGE_SIZE_MIN || pageSize > PAGE_SIZE_MAX) {
    throw new SbtError('page_out_of_range', `pageSize must be between ${PAGE_SIZE_MIN} and ${PAGE_SIZE_MAX} (got ${pageSize})`)
  }
  return { page, pageSize }
}

function parseWhole(raw: string | null, name: string, fallback: number): number {
  if (raw === null) return fallback
  if (!/^-?\d{1,12}$/.test(raw)) throw new SbtError('invalid_parameter', `${name} must be a whole number (got "${raw.slice(0, 40)}")`)
  return Number(raw)
}

/** A user's claimed SBTs as one JSON array, built by Postgres (one round trip per read). */
const CLAIMED_JSON = (userId: SQL) => sql`(
  select coalesce(json_agg(json_build_object(
    'kind', r.kind, 'level', r.level, 'sbt_id', r.sbt_id, 'title', r.title, 'task_name', r.task_name,
    'points', r.points, 'invites_required', r.invites_required, 'usd_required', r.usd_required
  ) order by r.level, r.sbt_id), '[]'::json)
  from sbt_claims c join sbt_rewards r on r.sbt_id = c.sbt_id
  where c.user_id = ${userId} and c.claim_type = ${CLAIMED})`

function parsedJson<T>(value: unknown): T {
  return (typeof value === 'string' ? JSON.parse(value) : value) as T
}

function groupOf(claimed: unknown): Grouped {
  const group = emptyGroup()
  for (const row of parsedJson<ClaimedRow[]>(claimed)) addClaimed(group, row)
  return group
}

export class SbtReads {
  constructor(
    private readonly db: Database,
    private readonly referralBaseUrl: string,
  ) {}

  /** The user record, read in one statement: the user, their claimed SBTs, their invitees and the referral campaign. */
  async user(rawAddress: string | null): Promise<UserRecord> {
    const address = normalizeSuiAddress(rawAddress)
    const [row] = rowsOf<{ invite_code: string; claimed: unknown; invitees: unknown; campaign_id: string | null }>(
      await this.db.execute(sql`
        select u.invite_code,
          ${CLAIMED_JSON(sql`u.id`)} as claimed,
          (select coalesce(json_agg(json_build_object('sui_address', i.sui_address, 'invite_date', coalesce(i.invited_at, i.created_at)) order by i.invited_at, i.id), '[]'::json)
             from sbt_users i where i.invited_by = u.id) as invitees,
          (select id from sbt_campaigns order by is_default desc, id limit 1) as campaign_id
        from sbt_users u where u.sui_address = ${address}`),
    )
    if (row === undefined) throw new SbtError('user_not_found', `No user with address ${address}`)
    const group = groupOf(row.claimed)
    const invitees = parsedJson<Array<{ sui_address: string; invite_date: string }>>(row.invitees).map((invitee) => ({
      suiAddress: invitee.sui_address,
      inviteDate: new Date(invitee.invite_date).toISOString(),
    }))
    return {
      suiAddress: address,
      claimedSocialSbts: group.social,
      claimedReferralSbts: group.referral,
      claimedLockdropSbts: group.lockdrop,
      totalRawPoints: group.points,
      sbtCount: group.count,
      referralLink: referralLinkOf(this.referralBaseUrl, row.campaign_id ?? undefined, row.invite_code),
      invitees,
      inviteeCount: invitees.length,
    }
  }

  /** One page of users in id order (the order they joined, stable under inserts at the end), in one statement. */
  async allUsers(page: number, pageSize: number): Promise<PagedRecord> {
    const offset = (page - 1) * pageSize
    const rows = rowsOf<{ sui_address: string | null; total: string | number; claimed: unknown }>(
      await this.db.execute(sql`
        with page as (select id, sui_address from sbt_users order by id limit ${pageSize} offset ${offset})
        select p.sui_address, t.value as total, ${CLAIMED_JSON(sql`p.id`)} as claimed
        from (select value from sbt_counters where name = 'users') t
        left join page p on true
        order by p.id`),
    )
    const totalUsers = Number(rows[0]?.total ?? 0)
    const users = rows
      .filter((row) => row.sui_address !== null)
      .map((row) => {
        const group = groupOf(row.claimed)
        // sbtCount and totalRawPoints count every claimed SBT, lockdrop ones included, though the
        // paged record lists only the social and referral ones (as the contract shapes it).
        return { suiAddress: row.sui_address!, sbtCount: group.count, totalRawPoints: group.points, claimedSocialSbts: group.social, claimedReferralSbts: group.referral }
      })
    return { users, pagination: { currentPage: page, pageSize, totalUsers, totalPages: Math.ceil(totalUsers / pageSize) } }
  }
}
