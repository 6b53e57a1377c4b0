import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { fakeAddress, query, startSbtApp, type SbtTestApp } from './support.ts'

let s: SbtTestApp
const alice = fakeAddress(0xa11ce)
const bob = fakeAddress(0xb0b)
const carol = fakeAddress(0xca201)
const dave = fakeAddress(0xda7e)
/** Users past the four named ones, so that paging has pages to turn. */
const EXTRA_USERS = 23

beforeAll(async () => {
  s = await startSbtApp()
  const imported = await s.importDocument({
    campaigns: [{ id: 'native season/1', name: 'Season 1', isDefault: true }, { id: 'other', name: 'Other' }],
    groups: [
      { id: 'g-social', campaignId: 'native season/1', name: 'Social' },
      { id: 'g-ref', campaignId: 'native season/1', name: 'Referral' },
      { id: 'g-lock', campaignId: 'native season/1', name: 'Lockdrop' },
    ],
    credentials: [{ id: 'visit', groupId: 'g-social', name: 'Visit', labelType: 8 }],
    rewards: [
      { sbtId: 11, kind: 'social', groupId: 'g-social', level: 2, title: 'Social 2', taskName: 'Visit twice', points: 20 },
      { sbtId: 10, kind: 'social', groupId: 'g-social', level: 1, title: 'Social 1', taskName: 'Visit', points: 10 },
      { sbtId: 20, kind: 'referral', groupId: 'g-ref', level: 1, title: 'Referrer 1', taskName: 'Invite 2', points: 50, invitesRequired: 2 },
      { sbtId: 30, kind: 'lockdrop', groupId: 'g-lock', level: 3, title: 'Locker 3', taskName: 'Lock 100 USDC', points: 300, usdRequired: 100.5 },
    ],
    users: [
      { suiAddress: alice, inviteCode: 'a+b&c d', createdAt: '2026-01-01T00:00:00Z' },
      { suiAddress: bob, inviteCode: 'bob', invitedBy: alice, invitedAt: '2026-02-03T04:05:06+02:00' },
      { suiAddress: carol, inviteCode: 'carol', invitedBy: alice, invitedAt: '2026-01-15T00:00:00Z' },
      { suiAddress: dave, inviteCode: 'dave' },
      ...Array.from({ length: EXTRA_USERS }, (_, index) => ({ suiAddress: fakeAddress(0x1000 + index), inviteCode: `extra${index}` })),
    ],
    claims: [
      { suiAddress: alice, sbtId: 10, claimType: 4 },
      { suiAddress: alice, sbtId: 11, claimType: 4 },
      { suiAddress: alice, sbtId: 20, claimType: 4 },
      { suiAddress: alice, sbtId: 30, claimType: 4 },
      { suiAddress: bob, sbtId: 10, claimType: 2 },
      { suiAddress: bob, sbtId: 11, claimType: 3 },
      { suiAddress: bob, sbtId: 20, claimType: 5 },
      { suiAddress: carol, sbtId: 10, claimType: 4 },
    ],
    // Duplicate result rows for one user and credential: every reader must tolerate them.
    results: [
      { suiAddress: alice, credentialId: 'visit', status: 1 },
      { suiAddress: alice, credentialId: 'visit', status: 1 },
      { suiAddress: alice, credentialId: 'visit', status: 1 },
    ],
  })
  expect(imported.body).toMatchObject({ users: 4 + EXTRA_USERS, repeated: false })
}, 120_000)
afterAll(async () => {
  await s.close()
}, 30_000)

describe('GET /gonative/user', () => {
  test('answers the user record with every field of the contract, in the envelope with code 0', async () => {
    const response = await s.sbt('GET', `/gonative/user?address=${alice}`)
    expect(response.status).toBe(200)
    expect(response.body.code).toBe(0)
    expect(response.body.message).toBe('success')
    expect(Object.keys(response.body.data).sort()).toEqual(
      ['suiAddress', 'claimedSocialSbts', 'claimedReferralSbts', 'claimedLockdropSbts', 'totalRawPoints', 'sbtCount', 'referralLink', 'invitees', 'inviteeCount'].sort(),
    )
    const data = response.body.data
    expect(data.suiAddress).toBe(alice)
    expect(data.claimedSocialSbts).toEqual([
      { level: 1, sbtId: 10, title: 'Social 1', taskName: 'Visit', points: 10 },
      { level: 2, sbtId: 11, title: 'Social 2', taskName: 'Visit twice', points: 20 },
    ])
    expect(data.claimedReferralSbts).toEqual([{ level: 1, sbtId: 20, title: 'Referrer 1', taskName: 'Invite 2', points: 50, invitesRequired: 2, claimed: true }])
    expect(data.claimedLockdropSbts).toEqual([{ level: 3, sbtId: 30, title: 'Locker 3', taskName: 'Lock 100 USDC', points: 300, usdRequired: 100.5 }])
  })

  test('totalRawPoints, sbtCount and inviteeCount agree with the lists', async () => {
    const { data } = (await s.sbt('GET', `/gonative/user?address=${alice}`)).body
    const items = [...data.claimedSocialSbts, ...data.claimedReferralSbts, ...data.claimedLockdropSbts]
    expect(data.sbtCount).toBe(items.length)
    expect(data.sbtCount).toBe(4)
    expect(data.totalRawPoints).toBe(items.reduce((sum: number, item: { points: number }) => sum + item.points, 0))
    expect(data.totalRawPoints).toBe(380)
    expect(data.inviteeCount).toBe(data.invitees.length)
    expect(data.inviteeCount).toBe(2)
  })

  test('counts only claimType 4 as claimed: eligible, minting and missed records are not holdings', async () => {
    const { data } = (await s.sbt('GET', `/gonative/user?address=${bob}`)).body
    expect(data.claimedSocialSbts).toEqual([])
    expect(data.claimedReferralSbts).toEqual([])
    expect(data.sbtCount).toBe(0)
    expect(data.totalRawPoints).toBe(0)
  })

  test('lists invitees oldest first with inviteDate in ISO 8601 UTC', async () => {
    const { data } = (await s.sbt('GET', `/gonative/user?address=${alice}`)).body
    expect(data.invitees).toEqual([
      { suiAddress: carol, inviteDate: '2026-01-15T00:00:00.000Z' },
      { suiAddress: bob, inviteDate: '2026-02-03T02:05:06.000Z' },
    ])
    for (const invitee of data.invitees) expect(invitee.inviteDate).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
  })

  test('builds referralLink from the base address, the default campaign and the invite code, each encoded', async () => {
    const { data } = (await s.sbt('GET', `/gonative/user?address=${alice}`)).body
    expect(data.referralLink).toBe('https://app.example.test/native/incentive/native%20season%2F1?code=a%2Bb%26c+d')
    const parsed = new URL(data.referralLink)
    expect(parsed.searchParams.get('code')).toBe('a+b&c d')
    expect(decodeURIComponent(parsed.pathname)).toBe('/native/incentive/native season/1')
  })

  test('normalizes the address: upper case and a missing 0x find the same user', async () => {
    for (const form of [alice.toUpperCase().replace('0X', '0x'), alice.slice(2), alice.slice(2).toUpperCase()]) {
      const response = await s.sbt('GET', `/gonative/user?address=${form}`)
      expect(response.status).toBe(200)
      expect(response.body.data.suiAddress).toBe(alice)
    }
  })

  test.each([
    ['missing', ''],
    ['empty', '?address='],
    ['short form', '?address=0x2'],
    ['63 digits', `?address=0x${'a'.repeat(63)}`],
    ['65 digits', `?address=0x${'a'.repeat(65)}`],
    ['not hex', `?address=0x${'g'.repeat(64)}`],
    ['surrounding space', `?address=%20${alice}`],
    ['an EVM address', '?address=0x52908400098527886E0F7030069857D2E4169EE7'],
  ])('refuses a malformed address (%s) with 400 and code 40002', async (_name, search) => {
    const response = await s.sbt('GET', `/gonative/user${search}`)
    expect(response.status).toBe(400)
    expect(response.body).toEqual({ code: 40002, message: expect.any(String), data: null })
  })

  test('answers an unknown address with 404 and code 40401', async () => {
    const response = await s.sbt('GET', `/gonative/user?address=${fakeAddress(0xdead)}`)
    expect(response.status).toBe(404)
    expect(response.body.code).toBe(40401)
    expect(response.body.data).toBeNull()
  })

  test('a user with no invitees and no claims has empty lists and zero counts', async () => {
    const { data } = (await s.sbt('GET', `/gonative/user?address=${dave}`)).body
    expect(data).toMatchObject({ claimedSocialSbts: [], claimedReferralSbts: [], claimedLockdropSbts: [], totalRawPoints: 0, sbtCount: 0, invitees: [], inviteeCount: 0 })
    expect(data.referralLink).toBe('https://app.example.test/native/incentive/native%20season%2F1?code=dave')
  })
})

describe('GET /gonative/all-users', () => {
  const totalUsers = 4 + EXTRA_USERS

  test('defaults to page 1 of 10 and answers the pagination object', async () => {
    const response = await s.sbt('GET', '/gonative/all-users')
    expect(response.status).toBe(200)
    expect(response.body.code).toBe(0)
    expect(response.body.data.users).toHaveLength(10)
    expect(response.body.data.pagination).toEqual({ currentPage: 1, pageSize: 10, totalUsers, totalPages: Math.ceil(totalUsers / 10) })
  })

  test('each user has exactly the paged fields, with counts over every claimed SBT', async () => {
    const { users } = (await s.sbt('GET', '/gonative/all-users?page=1&pageSize=5')).body.data
    expect(Object.keys(users[0]).sort()).toEqual(['claimedReferralSbts', 'claimedSocialSbts', 'sbtCount', 'suiAddress', 'totalRawPoints'])
    const first = users.find((user: { suiAddress: string }) => user.suiAddress === alice)
    expect(first).toMatchObject({ sbtCount: 4, totalRawPoints: 380 })
    expect(first.claimedSocialSbts.map((item: { sbtId: number }) => item.sbtId)).toEqual([10, 11])
    expect(first.claimedReferralSbts).toEqual([{ level: 1, sbtId: 20, title: 'Referrer 1', taskName: 'Invite 2', points: 50, invitesRequired: 2, claimed: true }])
    expect(users.find((user: { suiAddress: string }) => user.suiAddress === bob).sbtCount).toBe(0)
  })

  test('pages are stable, in join order, and together list every user once', async () => {
    const seen: string[] = []
    for (let page = 1; page <= Math.ceil(totalUsers / 5); page++) {
      const response = await s.sbt('GET', `/gonative/all-users?page=${page}&pageSize=5`)
      expect(response.body.data.pagination.currentPage).toBe(page)
      seen.push(...response.body.data.users.map((user: { suiAddress: string }) => user.suiAddress))
    }
    expect(seen).toHaveLength(totalUsers)
    expect(new Set(seen).size).toBe(totalUsers)
    expect(seen.slice(0, 4)).toEqual([alice, bob, carol, dave])
    const again = await s.sbt('GET', '/gonative/all-users?page=2&pageSize=5')
    expect(again.body.data.users.map((user: { suiAddress: string }) => user.suiAddress)).toEqual(seen.slice(5, 10))
  })

  test('accepts the bounds: pageSize 5 and 20', async () => {
    expect((await s.sbt('GET', '/gonative/all-users?pageSize=5')).body.data.users).toHaveLength(5)
    const twenty = await s.sbt('GET', '/gonative/all-users?pageSize=20')
    expect(twenty.body.data.users).toHaveLength(20)
    expect(twenty.body.data.pagination.totalPages).toBe(2)
  })

  test('a page past the end is empty, with the same totals', async () => {
    const response = await s.sbt('GET', '/gonative/all-users?page=99')
    expect(response.status).toBe(200)
    expect(response.body.data.users).toEqual([])
    expect(response.body.data.pagination).toEqual({ currentPage: 99, pageSize: 10, totalUsers, totalPages: 3 })
  })

  test.each([
    ['pageSize=4', 40003],
    ['pageSize=21', 40003],
    ['pageSize=0', 40003],
    ['page=0', 40003],
    ['page=-1', 40003],
    ['page=abc', 40001],
    ['pageSize=1.5', 40001],
    ['pageSize=', 40001],
  ])('refuses %s with 400 and an error envelope, never clamping', async (search, code) => {
    const response = await s.sbt('GET', `/gonative/all-users?${search}`)
    expect(response.status).toBe(400)
    expect(response.body).toEqual({ code, message: expect.any(String), data: null })
  })

  test('totalUsers follows users added later (the counter is kept in the same transaction)', async () => {
    const before = (await s.sbt('GET', '/gonative/all-users')).body.data.pagination.totalUsers
    await s.importDocument({ users: [{ suiAddress: fakeAddress(0x9999), inviteCode: 'late' }] })
    const after = (await s.sbt('GET', '/gonative/all-users')).body.data.pagination.totalUsers
    expect(after).toBe(before + 1)
    const [row] = await query<{ count: string | number }>(s.app, 'select count(*) as count from sbt_users')
    expect(Number(row!.count)).toBe(after)
  })
})

test('an unknown path answers an error envelope with 404', async () => {
  const response = await s.sbt('GET', '/gonative/nothing')
  expect(response.status).toBe(404)
  expect(response.body.code).toBe(40405)
})
