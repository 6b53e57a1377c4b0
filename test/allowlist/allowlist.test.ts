import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { ScreeningRule } from '../../server/modules/screening/screening.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { eventually } from '../support/eventually.ts'

const SUI = `0x${'ab'.repeat(32)}`
const SUI_BLOCKED = `0x${'cd'.repeat(32)}`
const SUI_PARTNER_DOWN = `0x${'ef'.repeat(32)}`
// The USDT contract on Tron mainnet: a real, valid base58check address.
const TRON = 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t'
const DAY_SECONDS = 24 * 3600

/** A partner that cannot answer for one address: screening must fail closed. */
const flakyPartner: ScreeningRule = {
  name: 'flaky-partner',
  async check(subject) {
    if (subject.address === SUI_PARTNER_DOWN) throw new Error('partner timed out')
    return { outcome: 'pass' }
  },
}

let app: TestApp
let fx: LedgerFixture
let account: string

beforeAll(async () => {
  // The blocklist is configured in upper case: entries are compared in canonical form.
  app = await startTestApp({ screeningBlocklist: [SUI_BLOCKED] }, { screeningRules: [flakyPartner] })
  fx = await ledgerFixture(app, 'Allowlist Org')
  account = await fx.mint('allowlister')
})
afterAll(async () => {
  await app.close()
})

const register = (body: Record<string, unknown>, accountId = account) => fx.call('POST', `/v1/accounts/${accountId}/allowlist`, body)

async function allowlistCounts(): Promise<{ entries: number; events: number }> {
  const [row] = await queryRows<{ entries: string; events: string }>(
    app.kassa.runtime.db,
    sql`select (select count(*) from allowlist_entries) as entries, (select count(*) from events) as events`,
  )
  return { entries: Number(row!.entries), events: Number(row!.events) }
}

async function eventsOfType(type: string): Promise<Array<{ data: any }>> {
  return queryRows(app.kassa.runtime.db, sql`select data from events where org_id = ${fx.org.id} and type = ${type} order by seq`)
}

describe('allowlist registration', () => {
  test('registers a Sui destination as registered for 24 hours on the organization clock, in canonical form', async () => {
    const response = await register({ network: 'sui', address: SUI.toUpperCase().replace('0X', '0x'), label: 'cold wallet' })
    expect(response.status).toBe(201)
    expect(response.body).toMatchObject({ accountId: account, network: 'sui', address: SUI, label: 'cold wallet', state: 'registered', activatedAt: null })
    expect(new Date(response.body.activatesAt).getTime() - new Date(response.body.createdAt).getTime()).toBe(DAY_SECONDS * 1000)
    expect((await fx.call('GET', `/v1/allowlist/${response.body.id}`)).body).toEqual(response.body)
    const list = await fx.call('GET', `/v1/accounts/${account}/allowlist`)
    expect(list.body.entries.map((entry: { id: string }) => entry.id)).toContain(response.body.id)
  })

  test('registering the same destination again answers the existing entry without restarting its timelock', async () => {
    const first = await register({ network: 'tron', address: TRON })
    expect(first.status).toBe(201)
    await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 60 })
    const before = await allowlistCounts()
    const again = await register({ network: 'tron', address: TRON })
    expect(again.status).toBe(200)
    expect(again.body).toEqual(first.body)
    expect(await allowlistCounts()).toEqual(before)
  })

  const invalidAddresses: Array<{ name: string; network: string; address: string }> = [
    { name: 'a Sui short form', network: 'sui', address: '0x2' },
    { name: 'a Sui address with 63 hex digits', network: 'sui', address: `0x${'a'.repeat(63)}` },
    { name: 'a Sui address without 0x', network: 'sui', address: 'ab'.repeat(32) },
    { name: 'a Sui address with a non-hex digit', network: 'sui', address: `0x${'g'.repeat(64)}` },
    { name: 'a Tron address with one character changed', network: 'tron', address: 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6u' },
    { name: 'a Tron address on the Sui network', network: 'sui', address: TRON },
    { name: 'a Sui address on the Tron network', network: 'tron', address: SUI },
    { name: 'a Bitcoin address on the Tron network', network: 'tron', address: '1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa' },
  ]
  for (const { name, network, address } of invalidAddresses) {
    test(`refuses ${name} as invalid_request naming address, and stores nothing`, async () => {
      const before = await allowlistCounts()
      const response = await register({ network, address })
      expect({ status: response.status, code: response.body.error.code, field: response.body.error.field }).toEqual({ status: 400, code: 'invalid_request', field: 'address' })
      expect(await allowlistCounts()).toEqual(before)
    })
  }

  test('refuses an unknown network naming the field', async () => {
    const before = await allowlistCounts()
    const response = await register({ network: 'ethereum', address: SUI })
    expect({ status: response.status, code: response.body.error.code, field: response.body.error.field }).toEqual({ status: 400, code: 'invalid_request', field: 'network' })
    expect(await allowlistCounts()).toEqual(before)
  })

  test('a blocked address is screening_rejected and stores nothing', async () => {
    const before = await allowlistCounts()
    const response = await register({ network: 'sui', address: SUI_BLOCKED })
    expect({ status: response.status, code: response.body.error.code, field: response.body.error.field }).toEqual({ status: 422, code: 'screening_rejected', field: 'address' })
    expect(await allowlistCounts()).toEqual(before)
  })

  test('a screening partner that cannot decide fails closed with partner_unavailable and stores nothing', async () => {
    const before = await allowlistCounts()
    const response = await register({ network: 'sui', address: SUI_PARTNER_DOWN })
    expect({ status: response.status, code: response.body.error.code }).toEqual({ status: 503, code: 'partner_unavailable' })
    expect(await allowlistCounts()).toEqual(before)
  })

  test('a 503 partner_unavailable keeps no answer under its Idempotency-Key: the same key runs the request again', async () => {
    const send = (address: string) =>
      app.call('POST', `/v1/accounts/${account}/allowlist`, { key: fx.org.testKey, body: { network: 'sui', address }, headers: { 'idempotency-key': 'screening-down-then-up' } })
    const down = await send(SUI_PARTNER_DOWN)
    expect(down.status).toBe(503)
    // The same key again, the same request: run again, not replayed.
    const again = await send(SUI_PARTNER_DOWN)
    expect(again.status).toBe(503)
    expect(again.headers.get('idempotent-replayed')).toBeNull()
    // Nothing is kept under the key.
    const [record] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*)::text as count from idempotency_records where key = 'screening-down-then-up'`)
    expect(record!.count).toBe('0')
  })

  test('an unknown account or another organization\'s account is not_found', async () => {
    const other = await ledgerFixture(app, 'Other Allowlist Org')
    const before = await allowlistCounts()
    expect((await register({ network: 'sui', address: SUI }, 'acct_00000000000000000000000000000000')).status).toBe(404)
    expect((await other.call('POST', `/v1/accounts/${account}/allowlist`, { network: 'sui', address: SUI })).status).toBe(404)
    expect(await allowlistCounts()).toEqual(before)
    const mine = (await register({ network: 'sui', address: SUI })).body.id
    expect((await other.call('GET', `/v1/allowlist/${mine}`)).status).toBe(404)
    expect((await other.call('DELETE', `/v1/allowlist/${mine}`)).status).toBe(404)
  })

  test('a publishable key cannot register destinations', async () => {
    const response = await app.call('POST', `/v1/accounts/${account}/allowlist`, { key: fx.org.publishableKey, body: { network: 'sui', address: SUI } })
    expect({ status: response.status, code: response.body.error.code }).toEqual({ status: 403, code: 'permission_denied' })
  })
})

describe('allowlist timelock', () => {
  test('an entry stays registered until 24 hours have passed, then activates once with treasury.allowlist.activated', async () => {
    const holder = await fx.mint('timelocked')
    const entry = (await register({ network: 'sui', address: SUI }, holder)).body
    await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: DAY_SECONDS - 1 })
    expect((await fx.call('GET', `/v1/allowlist/${entry.id}`)).body.state).toBe('registered')
    expect((await eventsOfType('treasury.allowlist.activated')).filter((event) => event.data.id === entry.id)).toHaveLength(0)
    await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 1 })
    const active = (await fx.call('GET', `/v1/allowlist/${entry.id}`)).body
    expect(active.state).toBe('active')
    expect(active.activatedAt).not.toBeNull()
    await fx.call('POST', '/v1/sandbox/clock/advance', { seconds: 60 })
    const activations = (await eventsOfType('treasury.allowlist.activated')).filter((event) => event.data.id === entry.id)
    expect(activations.map((event) => event.data)).toEqual([{ id: entry.id, accountId: holder, address: SUI, network: 'sui' }])
  })

  test('removing an entry stops it for new withdrawals; removing it again answers it unchanged', async () => {
    const holder = await fx.mint('remover')
    const entry = (await register({ network: 'tron', address: TRON }, holder)).body
    const removed = await fx.call('DELETE', `/v1/allowlist/${entry.id}`)
    expect(removed.status).toBe(200)
    expect(removed.body.state).toBe('removed')
    const before = await allowlistCounts()
    expect((await fx.call('DELETE', `/v1/allowlist/${entry.id}`)).body).toEqual(removed.body)
    expect(await allowlistCounts()).toEqual(before)
    // The destination can be registered afresh, with a new timelock.
    const again = await register({ network: 'tron', address: TRON }, holder)
    expect(again.status).toBe(201)
    expect(again.body.id).not.toBe(entry.id)
  })
})

describe('allowlist activation sweep', () => {
  test('activates entries as wall-clock time passes, without any clock advance', async () => {
    let wallMs = Date.now()
    const timed = await startTestApp({}, { wallClockMs: () => wallMs })
    try {
      const tfx = await ledgerFixture(timed, 'Sweep Org')
      const holder = await tfx.mint('swept')
      const entry = (await tfx.call('POST', `/v1/accounts/${holder}/allowlist`, { network: 'sui', address: SUI })).body
      expect(entry.state).toBe('registered')
      wallMs += DAY_SECONDS * 1000
      const state = await eventually(async () => (await queryRows<{ state: string }>(timed.kassa.runtime.db, sql`select state from allowlist_entries where id = ${entry.id}`))[0]!.state, {
        what: 'the entry activated by the sweep',
        timeoutMs: 5_000,
        intervalMs: 50,
        accept: (value) => value === 'active',
      })
      expect(state).toBe('active')
      const [events] = await queryRows<{ count: string }>(timed.kassa.runtime.db, sql`select count(*) from events where type = 'treasury.allowlist.activated'`)
      expect(Number(events!.count)).toBe(1)
    } finally {
      await timed.close()
    }
  }, 30_000)
})
