import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { businessDateOf, cutoffOf, instantOfWallMs } from '../../server/modules/statements/business-day.ts'
import { verifyStatementChain } from '../../server/modules/statements/verify.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { ManualWallClock, statementsFixture, type StatementsFixture } from './support.ts'


// Each test seals days on a database of its own; a busy shared host can take well over 5 s for that.
setDefaultTimeout(60_000)
const iso = (ms: number) => new Date(ms).toISOString()

describe('business dates in a time zone (pure)', () => {
  const newYork = { timeZone: 'America/New_York', cutoffHour: 0 }
  test.each([
    // date, cut-off (end of the date), length of the date in hours
    ['2027-03-13', '2027-03-14T05:00:00.000Z', 24],
    ['2027-03-14', '2027-03-15T04:00:00.000Z', 23],
    ['2027-11-07', '2027-11-08T05:00:00.000Z', 25],
  ] as const)('New York %s ends at %s and lasts %i hours', (date, cutoff, hours) => {
    expect(iso(cutoffOf(date, newYork))).toBe(cutoff)
    const previous = new Date(Date.parse(`${date}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10)
    expect((cutoffOf(date, newYork) - cutoffOf(previous, newYork)) / 3_600_000).toBe(hours)
  })

  test('a cut-off hour skipped by the jump forward falls where the jump lands; one that happens twice is the first', () => {
    expect(iso(cutoffOf('2027-03-14', { timeZone: 'America/New_York', cutoffHour: 2 }))).toBe('2027-03-14T07:00:00.000Z')
    expect(iso(cutoffOf('2027-11-07', { timeZone: 'America/New_York', cutoffHour: 1 }))).toBe('2027-11-07T05:00:00.000Z')
    expect(iso(instantOfWallMs(Date.parse('2027-03-28T02:30:00Z'), 'Europe/Berlin'))).toBe('2027-03-28T01:30:00.000Z')
  })

  test('an instant at the cut-off belongs to the next date; a millisecond before, to the date', () => {
    const berlin = { timeZone: 'Europe/Berlin', cutoffHour: 17 }
    const cutoff = cutoffOf('2027-06-01', berlin)
    expect(iso(cutoff)).toBe('2027-06-01T15:00:00.000Z')
    expect(businessDateOf(cutoff - 1, berlin)).toBe('2027-06-01')
    expect(businessDateOf(cutoff, berlin)).toBe('2027-06-02')
    // Before 17:00 local, an instant of the 1st is the 1st; after it, the 2nd.
    expect(businessDateOf(Date.parse('2027-06-01T06:00:00Z'), berlin)).toBe('2027-06-01')
    expect(businessDateOf(Date.parse('2027-05-31T15:00:00Z'), berlin)).toBe('2027-06-01')
    expect(businessDateOf(Date.parse('2027-05-31T14:59:59.999Z'), berlin)).toBe('2027-05-31')
  })
})

// The organization's clock starts on a Saturday in New York, the day before clocks go forward.
const wall = new ManualWallClock(Date.parse('2027-03-13T12:00:00.000Z'))
let app: TestApp
let fx: StatementsFixture
let alice: string

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: wall.read })
  fx = await statementsFixture(app, wall, 'New York Org')
  alice = await fx.mint('alice')
}, 60_000)
afterAll(async () => {
  await app.close()
}, 60_000)

describe("an organization's business day, across a daylight-saving change", () => {
  test('the operator sets a time zone and cut-off hour; bad values are invalid_request naming the field and change nothing', async () => {
    const path = `/ops/v1/orgs/${fx.org.id}/business-day`
    expect((await app.ops('GET', path)).body).toEqual({ orgId: fx.org.id, timeZone: 'UTC', cutoffHour: 0, nextBusinessDate: null })
    for (const [body, field] of [
      [{ timeZone: 'Mars/Olympus_Mons', cutoffHour: 0 }, 'timeZone'],
      [{ timeZone: 'America/New_York', cutoffHour: 24 }, 'cutoffHour'],
      [{ timeZone: 'America/New_York', cutoffHour: -1 }, 'cutoffHour'],
    ] as const) {
      const response = await app.ops('PUT', path, body)
      expect({ status: response.status, code: response.body.error?.code, field: response.body.error?.field }).toEqual({ status: 400, code: 'invalid_request', field })
    }
    expect((await app.ops('GET', path)).body.timeZone).toBe('UTC')
    expect((await app.ops('PUT', '/ops/v1/orgs/org_missing/business-day', { timeZone: 'UTC', cutoffHour: 0 })).status).toBe(404)
    const set = await app.ops('PUT', path, { timeZone: 'America/New_York', cutoffHour: 0 })
    expect(set.status).toBe(200)
    expect(set.body).toEqual({ orgId: fx.org.id, timeZone: 'America/New_York', cutoffHour: 0, nextBusinessDate: null })
  })

  test('the day clocks go forward is a 23-hour statement, and the local-midnight edge splits movements by the millisecond', async () => {
    await fx.fund(alice, '10')
    // 23:59:59.999 and 00:00:00.001 New York time (EDT), around the cut-off that ends the 14th.
    fx.at('2027-03-15T03:59:59.999Z')
    await fx.fund(alice, '1')
    fx.at('2027-03-15T04:00:00.001Z')
    await fx.fund(alice, '2')
    fx.at('2027-03-16T04:01:00.000Z')
    expect((await fx.seal()).map((entry) => entry.businessDate)).toEqual(['2027-03-13', '2027-03-14', '2027-03-15'])
    const statements = await fx.statements(alice)
    expect(statements.map((s) => [s.businessDate, s.periodStart, s.periodEnd, s.lines.map((line) => line.amount), s.closingBalance, s.invariantOk])).toEqual([
      ['2027-03-13', '2027-03-13T05:00:00.000Z', '2027-03-14T05:00:00.000Z', ['10.000000'], '10.000000', true],
      ['2027-03-14', '2027-03-14T05:00:00.000Z', '2027-03-15T04:00:00.000Z', ['1.000000'], '11.000000', true],
      ['2027-03-15', '2027-03-15T04:00:00.000Z', '2027-03-16T04:00:00.000Z', ['2.000000'], '13.000000', true],
    ])
    expect(statements.every((s) => s.timeZone === 'America/New_York' && s.cutoffHour === 0)).toBe(true)
  })

  test('a new cut-off hour applies from the next date to seal; the period starts where the last sealed one ended', async () => {
    const set = await app.ops('PUT', `/ops/v1/orgs/${fx.org.id}/business-day`, { timeZone: 'America/New_York', cutoffHour: 17 })
    expect(set.body.nextBusinessDate).toBe('2027-03-16')
    fx.at('2027-03-16T20:59:59.999Z')
    await fx.fund(alice, '3')
    fx.at('2027-03-16T21:00:00.000Z')
    await fx.fund(alice, '4')
    fx.at('2027-03-17T21:01:00.000Z')
    expect((await fx.seal()).map((entry) => entry.businessDate)).toEqual(['2027-03-16', '2027-03-17'])
    const statements = await fx.statements(alice, '?from=2027-03-16')
    expect(statements.map((s) => [s.businessDate, s.periodStart, s.periodEnd, s.lines.map((line) => line.amount), s.cutoffHour])).toEqual([
      ['2027-03-16', '2027-03-16T04:00:00.000Z', '2027-03-16T21:00:00.000Z', ['3.000000'], 17],
      ['2027-03-17', '2027-03-16T21:00:00.000Z', '2027-03-17T21:00:00.000Z', ['4.000000'], 17],
    ])
    const jwks = (await app.call('GET', '/.well-known/jwks.json')).body
    expect(await verifyStatementChain(await fx.statements(alice), jwks, { fromFirst: true })).toMatchObject({ ok: true, statements: 5 })
  })
})
