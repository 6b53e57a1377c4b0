import { sql } from 'drizzle-orm'
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
  user_id: string | number
  kind: 'social' | 'referral' | 'lockdrop'
  level: number
  sbt_id: number
  title: string
  task_name: string
  points: number
  invites_required: number | null
  usd_required: string | null
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

export class SbtReads {
  constructor(
    private readonly db: Database,
    private readonly referralBaseUrl: string,
  ) {}

  async user(rawAddress: string | null): Promise<UserRecord> {
    const address = normalizeSuiAddress(rawAddress)
    const users = rowsOf<{ id: string | number; invite_code: string }>(
      await this.db.execute(sql`select id, invite_code from sbt_users where sui_address = ${address}`),
    )
    const user = users[0]
    if (user === undefined) throw new SbtError('user_not_found', `No user with address ${address}`)
    const [claimed, invitees, campaigns] = await Promise.all([
      this.db.execute(sql`
        select c.user_id, r.kind, r.level, r.sbt_id, r.title, r.task_name, r.points, r.invites_required, r.usd_required
        from sbt_claims c join sbt_rewards r on r.sbt_id = c.sbt_id
        where c.user_id = ${user.id} and c.claim_type = ${CLAIMED}
        order by r.level, r.sbt_id`),
      this.db.execute(sql`
        select sui_address, coalesce(invited_at, created_at) as invite_date
        from sbt_users where invited_by = ${user.id}
        order by invited_at, id`),
      this.db.execute(sql`select id from sbt_campaigns order by is_default desc, id limit 1`),
    ])
    const group = emptyGroup()
    for (const row of rowsOf<ClaimedRow>(claimed)) addClaimed(group, row)
    const inviteeList = rowsOf<{ sui_address: string; invite_date: Date | string }>(invitees).map((row) => ({
      suiAddress: row.sui_address,
      inviteDate: new Date(row.invite_date).toISOString(),
    }))
    const campaignId = rowsOf<{ id: string }>(campaigns)[0]?.id
    return {
      suiAddress: address,
      claimedSocialSbts: group.social,
      claimedReferralSbts: group.referral,
      claimedLockdropSbts: group.lockdrop,
      totalRawPoints: group.points,
      sbtCount: group.count,
      referralLink: referralLinkOf(this.referralBaseUrl, campaignId, user.invite_code),
      invitees: inviteeList,
      inviteeCount: inviteeList.length,
    }
  }

  /** One page of users in id order (the order they joined, stable under inserts at the end). */
  async allUsers(page: number, pageSize: number): Promise<PagedRecord> {
    const offset = (page - 1) * pageSize
    const [counted, pageRows] = await Promise.all([
      this.db.execute(sql`select value from sbt_counters where name = 'users'`),
      this.db.execute(sql`select id, sui_address from sbt_users order by id limit ${pageSize} offset ${offset}`),
    ])
    const totalUsers = Number(rowsOf<{ value: string | number }>(counted)[0]?.value ?? 0)
    const users = rowsOf<{ id: string | number; sui_address: string }>(pageRows)
    const groups = new Map<string, Grouped>()
    for (const user of users) groups.set(String(user.id), emptyGroup())
    if (users.length > 0) {
      const ids = users.map((user) => Number(user.id))
      const claimed = await this.db.execute(sql`
        select c.user_id, r.kind, r.level, r.sbt_id, r.title, r.task_name, r.points, r.invites_required, r.usd_required
        from sbt_claims c join sbt_rewards r on r.sbt_id = c.sbt_id
        where c.user_id = any(${sql.raw(`'{${ids.join(',')}}'::bigint[]`)}) and c.claim_type = ${CLAIMED}
        order by c.user_id, r.level, r.sbt_id`)
      for (const row of rowsOf<ClaimedRow>(claimed)) addClaimed(groups.get(String(row.user_id))!, row)
    }
    return {
      users: users.map((user) => {
        const group = groups.get(String(user.id))!
        // sbtCount and totalRawPoints count every claimed SBT, lockdrop ones included, though the
        // paged record lists only the social and referral ones (as the contract shapes it).
        return { suiAddress: user.sui_address, sbtCount: group.count, totalRawPoints: group.points, claimedSocialSbts: group.social, claimedReferralSbts: group.referral }
      }),
      pagination: { currentPage: page, pageSize, totalUsers, totalPages: Math.ceil(totalUsers / pageSize) },
    }
  }
}
