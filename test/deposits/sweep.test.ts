import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { eventually } from '../support/eventually.ts'
import { txHash } from './support.ts'

/**
 * The deposit sweep on the real wall clock: it runs when an arrival reaches finality, not on a
 * fixed poll (see `DueSweep`). Its backstop is 2 s, so an arrival credited well within that after
 * Sui's half-second finality was credited by the wake its own observation set.
 */
let app: TestApp
let fx: LedgerFixture

beforeAll(async () => {
  app = await startTestApp()
  fx = await ledgerFixture(app, 'Sweep Org')
})
afterAll(async () => {
  await app.close()
})

describe('deposit sweep', () => {
  test('credits a Sui arrival when it reaches finality as wall-clock time passes, without a clock advance', async () => {
    const account = await fx.mint('swept')
    const address = (await fx.call('POST', `/v1/accounts/${account}/deposit-addresses`, { asset: 'USDC' })).body.address as string
    const arrival = await fx.call('POST', '/v1/sandbox/chain/arrivals', { network: 'sui', asset: 'USDC', address, amount: '5', txHash: txHash('sui') })
    expect(arrival.status).toBe(201)
    expect(arrival.body.state).toBe('confirming')
    const finalAtMs = Date.parse(arrival.body.finalAt)
    // A real wait: this test is about the sweep waking on the wall clock by itself.
    const balance = await eventually(() => fx.balance(account), {
      what: 'the arrival credited',
      accept: (seen) => seen.available === '5.000000',
      timeoutMs: Math.max(0, finalAtMs + 5_000 - Date.now()),
      intervalMs: 20,
    })
    const creditedAt = Date.now()
    expect(balance).toMatchObject({ available: '5.000000', inFlight: '0.000000' })
    // Never before finality; and not left for the 2 s backstop.
    expect(creditedAt).toBeGreaterThanOrEqual(finalAtMs)
    expect(creditedAt - finalAtMs).toBeLessThan(1_500)
    // Balances are memory, answered before the commit; the arrival's row is read from Postgres.
    await app.kassa.runtime.ledger.drain()
    expect((await fx.call('GET', `/v1/sandbox/chain/arrivals/${arrival.body.id}`)).body.state).toBe('final')
    await expectVerified(app)
  })
})
