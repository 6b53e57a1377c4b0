import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { SYSTEM_ACCOUNTS } from '../../server/ledger/hot-balances.ts'
import type { ScreeningRule } from '../../server/modules/screening/screening.ts'
import { expectVerified } from '../ledger/support.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import {
  DAY_SECONDS,
  eventsOf,
  expectWithdrawalRefused,
  SUI_DESTINATION,
  systemBalance,
  TRON_DESTINATION,
  withdrawalFixture,
  withdrawalState,
  type WithdrawalFixture,
} from './support.ts'

/** Addresses a test blocks after they were allowlisted: screening runs again at withdrawal time. */
const blockedLater = new Set<string>()
const laterScreening: ScreeningRule = {
  name: 'blocked-later',
  async check(subject) {
    return blockedLater.has(subject.address) ? { outcome: 'reject', reason: 'flagged after registration' } : { outcome: 'pass' }
  },
}

// The wall clock stands still: the organization's clock moves only when a test advances it, so
// nothing reaches finality on the chain between two steps of a test.
const WALL_MS = Date.now()
let app: TestApp
let fx: WithdrawalFixture
let account: string
let suiEntry: string

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => WALL_MS, screeningRules: [laterScreening] })
  fx = await withdrawalFixture(app)
  const threshold = await app.ops('PUT', `/ops/v1/orgs/${fx.org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '500' })
  expect(threshold.status).toBe(200)
  account = await fx.mint('withdrawer')
  await fx.fund(account, '10000')
  suiEntry = await fx.activeEntry(account, 'sui', SUI_DESTINATION)
})
afterAll(async () => {
  await app.close()
})

async function pendingWithdrawal(amount = '600'): Promise<any> {
  const created = await fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId: await fx.quote(account, amount) })
  expect(created.status).toBe(201)
  expect(created.body.state).toBe('pending_approval')
  return created.body
}

describe('withdrawal at or below the approval threshold', () => {
  test('is approved at creation, broadcast, and completes with chain evidence; balances and verify hold at every step', async () => {
    const holder = await fx.mint('small')
    await fx.fund(holder, '1000')
    const entry = await fx.activeEntry(holder, 'sui', SUI_DESTINATION)
    const feesBefore = await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.fees, 'USDC')
    const created = await fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: await fx.quote(holder, '100') })
    expect(created.status).toBe(201)
    expect(created.body).toMatchObject({
      accountId: holder,
      network: 'sui',
      asset: 'USDC',
      address: SUI_DESTINATION,
      amount: '100.000000',
      fees: { network: '0.050000', service: '0.150000' },
      totalDebited: '100.200000',
      state: 'approved',
      approval: { required: false, approvedBy: { type: 'policy', id: null } },
      chainEvidence: null,
    })
    expect(created.body.unsignedTransaction).toMatchObject({ network: 'sui', encoding: 'json' })
    expect(JSON.parse(created.body.unsignedTransaction.payload)).toMatchObject({ to: SUI_DESTINATION, amountMinor: '100000000', reference: created.body.id })
    expect(await fx.balance(holder)).toMatchObject({ total: '1000.000000', available: '899.800000', inFlight: '100.200000', held: '0.000000' })
    await expectVerified(app)

    const submitted = await fx.waitForState(created.body.id, 'submitted')
    expect(submitted.txHash).toEqual(expect.any(String))
    expect(await fx.balance(holder)).toMatchObject({ total: '1000.000000', available: '899.800000', inFlight: '100.200000' })
    await expectVerified(app)

    await fx.advance(5)
    const completed = await fx.waitForState(created.body.id, 'confirmed')
    expect(completed.chainEvidence).toEqual({
      txHash: submitted.txHash,
      network: 'sui',
      block: expect.stringMatching(/^\d+$/),
      confirmations: 1,
      confirmedAt: expect.any(String),
    })
    expect(completed.closedAt).not.toBeNull()
    expect(await fx.balance(holder)).toMatchObject({ total: '899.800000', available: '899.800000', inFlight: '0.000000' })
    expect((await systemBalance(app, fx.org.id, SYSTEM_ACCOUNTS.fees, 'USDC')) - feesBefore).toBe(150_000n)
    await expectVerified(app)

    const types = (await eventsOf(app, fx.org.id, 'treasury.withdrawal.')).filter((event) => event.data.id === created.body.id).map((event) => event.type)
    expect(types).toEqual(['treasury.withdrawal.approved', 'treasury.withdrawal.submitted', 'treasury.withdrawal.completed'])
  })
})

describe('withdrawal above the approval threshold', () => {
  test('waits in pending_approval with its event and no unsigned transaction; the money is in flight', async () => {
    const before = await fx.balance(account)
    const pending = await pendingWithdrawal()
    expect(pending.approval).toEqual({ required: true, approvedBy: null, approvedAt: null })
    expect(pending.unsignedTransaction).toBeNull()
    const after = await fx.balance(account)
    // 600 plus the network fee (0.05) and the service fee (15 bps: 0.90).
    expect(pending.totalDebited).toBe('600.950000')
    expect(Number(before.available) - Number(after.available)).toBeCloseTo(600.95, 6)
    expect(Number(after.inFlight) - Number(before.inFlight)).toBeCloseTo(600.95, 6)
    const event = (await eventsOf(app, fx.org.id, 'treasury.withdrawal.pending_approval')).find((entry) => entry.data.id === pending.id)
    expect(event?.data).toMatchObject({ id: pending.id, accountId: account, amount: '600.000000', address: SUI_DESTINATION })
    await expectVerified(app)
  })

  test('approval by the key that created it is permission_denied and changes nothing', async () => {
    const pending = await pendingWithdrawal()
    await expectWithdrawalRefused(app, () => fx.call('POST', `/v1/withdrawals/${pending.id}/approve`), 403, 'permission_denied')
    expect((await fx.call('GET', `/v1/withdrawals/${pending.id}`)).body.state).toBe('pending_approval')
  })

  test('approval by a key that replaced the creating key through rotation is permission_denied too', async () => {
    const pending = await pendingWithdrawal()
    const rotated = await app.ops('POST', `/ops/v1/keys/${fx.secondKeyId}/rotate`, { overlapSeconds: 3600 })
    expect(rotated.status).toBe(201)
    const created = await fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId: await fx.quote(account, '700') }, fx.secondKey)
    expect(created.status).toBe(201)
    await expectWithdrawalRefused(app, () => fx.callAs(rotated.body.key.key, 'POST', `/v1/withdrawals/${created.body.id}/approve`), 403, 'permission_denied')
    // A genuinely different key (the original test key) may approve both.
    expect((await fx.call('POST', `/v1/withdrawals/${created.body.id}/approve`)).status).toBe(200)
    expect((await fx.callAs(rotated.body.key.key, 'POST', `/v1/withdrawals/${pending.id}/approve`)).status).toBe(200)
  })

  test('a publishable key cannot approve', async () => {
    const pending = await pendingWithdrawal()
    const before = await withdrawalState(app)
    const response = await app.call('POST', `/v1/withdrawals/${pending.id}/approve`, { key: fx.org.publishableKey })
    expect({ status: response.status, code: response.body.error.code }).toEqual({ status: 403, code: 'permission_denied' })
    expect(await withdrawalState(app)).toEqual(before)
  })

  test('a second key approves: event, deterministic unsigned transaction, then broadcast and completion', async () => {
    const pending = await pendingWithdrawal()
    const approved = await fx.callAs(fx.secondKey, 'POST', `/v1/withdrawals/${pending.id}/approve`)
    expect(approved.status).toBe(200)
    expect(approved.body.state).toBe('approved')
    expect(approved.body.approval).toMatchObject({ required: true, approvedBy: { type: 'key', id: fx.secondKeyId } })
    const rebuilt = app.kassa.runtime.chain.buildUnsignedTransaction({
      withdrawalId: pending.id,
      orgId: fx.org.id,
      network: 'sui',
      asset: 'USDC',
      toAddress: SUI_DESTINATION,
      amountMinor: 600_000_000n,
    })
    expect(approved.body.unsignedTransaction).toEqual(rebuilt)
    const event = (await eventsOf(app, fx.org.id, 'treasury.withdrawal.approved')).find((entry) => entry.data.id === pending.id)
    expect(event?.data).toMatchObject({ id: pending.id, accountId: account, amount: '600.000000', address: SUI_DESTINATION })
    await expectVerified(app)
    // Approving twice is a conflict and changes nothing.
    await expectWithdrawalRefused(app, () => fx.callAs(fx.secondKey, 'POST', `/v1/withdrawals/${pending.id}/approve`), 409, 'conflict')
    await fx.waitForState(pending.id, 'submitted')
    await fx.advance(5)
    const completed = await fx.waitForState(pending.id, 'confirmed')
    expect(completed.chainEvidence.txHash).toBe(completed.txHash)
    await expectVerified(app)
  })

  test('an operator approves through /ops/v1', async () => {
    const pending = await pendingWithdrawal()
    const approved = await app.ops('POST', `/ops/v1/orgs/${fx.org.id}/withdrawals/${pending.id}/approve`, { operator: 'alice' })
    expect(approved.status).toBe(200)
    expect(approved.body.approval.approvedBy).toEqual({ type: 'operator', id: 'alice' })
    expect(approved.body.unsignedTransaction).not.toBeNull()
    const queue = await app.ops('GET', `/ops/v1/orgs/${fx.org.id}/withdrawals?state=approved`)
    expect(queue.body.withdrawals.map((entry: { id: string }) => entry.id)).toContain(pending.id)
    // Another organization's id path does not reach it.
    const other = await withdrawalFixture(app, 'Other Withdrawals Org')
    expect((await app.ops('POST', `/ops/v1/orgs/${other.org.id}/withdrawals/${pending.id}/approve`)).status).toBe(404)
    await expectVerified(app)
  })

  test('rejecting a pending withdrawal returns everything to available; it cannot be approved afterwards', async () => {
    const before = await fx.balance(account)
    const pending = await pendingWithdrawal()
    const rejected = await fx.call('POST', `/v1/withdrawals/${pending.id}/reject`, { reason: 'changed my mind' })
    expect(rejected.status).toBe(200)
    expect(rejected.body).toMatchObject({ state: 'rejected', rejectedBy: { type: 'key', id: fx.org.testKeyId }, failureReason: 'changed my mind' })
    expect(await fx.balance(account)).toEqual(before)
    await expectVerified(app)
    await expectWithdrawalRefused(app, () => fx.callAs(fx.secondKey, 'POST', `/v1/withdrawals/${pending.id}/approve`), 409, 'conflict')
    await expectWithdrawalRefused(app, () => app.ops('POST', `/ops/v1/orgs/${fx.org.id}/withdrawals/${pending.id}/reject`), 409, 'conflict')
    const types = (await eventsOf(app, fx.org.id, 'treasury.withdrawal.')).filter((event) => event.data.id === pending.id).map((event) => event.type)
    expect(types).toEqual(['treasury.withdrawal.pending_approval', 'treasury.withdrawal.rejected'])
  })

  test('of many simultaneous rejections and approvals exactly one wins, and the money moves at most once', async () => {
    const before = await fx.balance(account)
    const pending = await pendingWithdrawal()
    const answers = await Promise.all([
      ...Array.from({ length: 4 }, () => fx.call('POST', `/v1/withdrawals/${pending.id}/reject`)),
      ...Array.from({ length: 4 }, () => app.ops('POST', `/ops/v1/orgs/${fx.org.id}/withdrawals/${pending.id}/reject`)),
      ...Array.from({ length: 4 }, () => fx.callAs(fx.secondKey, 'POST', `/v1/withdrawals/${pending.id}/approve`)),
    ])
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(1)
    expect(answers.filter((answer) => answer.status !== 200).map((answer) => answer.body.error.code)).toEqual(Array(11).fill('conflict'))
    const final = (await fx.call('GET', `/v1/withdrawals/${pending.id}`)).body
    if (final.state === 'rejected') expect(await fx.balance(account)).toEqual(before)
    else expect(final.state).toMatch(/approved|submitted/)
    await expectVerified(app)
  })

  test('an operator can reject too', async () => {
    const pending = await pendingWithdrawal()
    const rejected = await app.ops('POST', `/ops/v1/orgs/${fx.org.id}/withdrawals/${pending.id}/reject`, { operator: 'bob', reason: 'suspicious' })
    expect(rejected.status).toBe(200)
    expect(rejected.body.rejectedBy).toEqual({ type: 'operator', id: 'bob' })
    await expectVerified(app)
  })
})

describe('withdrawal failure on chain', () => {
  test('a broadcast that throws is tried again by the sweep and the withdrawal is submitted once', async () => {
    const holder = await fx.mint('retried')
    await fx.fund(holder, '1000', 'USDT')
    const entry = await fx.activeEntry(holder, 'tron', TRON_DESTINATION)
    const chain = app.kassa.runtime.chain
    const submit = chain.submitWithdrawal.bind(chain)
    let attempts = 0
    chain.submitWithdrawal = async (transfer) => {
      attempts += 1
      if (attempts === 1) throw new Error('node unreachable (test)')
      return submit(transfer)
    }
    const errors: unknown[] = []
    const logError = console.error
    console.error = (...args: unknown[]) => errors.push(args)
    try {
      const created = await fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: await fx.quote(holder, '100', 'USDT') })
      expect(created.status).toBe(201)
      const submitted = await fx.waitForState(created.body.id, 'submitted')
      expect(submitted.txHash).toMatch(/^[0-9a-f]{64}$/)
      expect(attempts).toBe(2)
      expect(errors.length).toBeGreaterThanOrEqual(1)
      expect((await eventsOf(app, fx.org.id, 'treasury.withdrawal.submitted')).filter((event) => event.data.id === created.body.id)).toHaveLength(1)
    } finally {
      chain.submitWithdrawal = submit
      console.error = logError
    }
    await expectVerified(app)
  })

  test('a failed broadcast ends failed with the funds back in available, exactly once', async () => {
    const holder = await fx.mint('failing')
    await fx.fund(holder, '1000', 'USDT')
    const entry = await fx.activeEntry(holder, 'tron', TRON_DESTINATION)
    const created = await fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: await fx.quote(holder, '100', 'USDT') })
    expect(created.status).toBe(201)
    expect(created.body.totalDebited).toBe('101.150000')
    expect(await fx.balance(holder, 'USDT')).toMatchObject({ total: '1000.000000', available: '898.850000', inFlight: '101.150000' })
    await fx.waitForState(created.body.id, 'submitted')
    const fail = await fx.call('POST', `/v1/sandbox/chain/withdrawals/${created.body.id}/fail`, { reason: 'out of energy' })
    expect(fail.status).toBe(200)
    await fx.advance(120)
    const failed = await fx.waitForState(created.body.id, 'failed')
    expect(failed.failureReason).toBe('out of energy')
    expect(failed.chainEvidence).toBeNull()
    expect(await fx.balance(holder, 'USDT')).toMatchObject({ total: '1000.000000', available: '1000.000000', inFlight: '0.000000' })
    await expectVerified(app)

    // The outcome delivered again (after a restart, on another instance) changes nothing; nor does a contradicting one.
    const before = await withdrawalState(app)
    await app.kassa.withdrawals.applyOutcome({ withdrawalId: created.body.id, orgId: fx.org.id, status: 'failed', reason: 'out of energy' })
    await app.kassa.withdrawals.applyOutcome({
      withdrawalId: created.body.id,
      orgId: fx.org.id,
      status: 'completed',
      evidence: { txHash: failed.txHash, network: 'tron', block: '1', confirmations: 19, confirmedAt: new Date().toISOString() },
    })
    expect(await withdrawalState(app)).toEqual(before)
    const types = (await eventsOf(app, fx.org.id, 'treasury.withdrawal.')).filter((event) => event.data.id === created.body.id).map((event) => event.type)
    expect(types).toEqual(['treasury.withdrawal.approved', 'treasury.withdrawal.submitted', 'treasury.withdrawal.failed'])
  })

  test('the same completion delivered many times at once moves the money once', async () => {
    const holder = await fx.mint('redelivered')
    await fx.fund(holder, '1000', 'USDT')
    const entry = await fx.activeEntry(holder, 'tron', TRON_DESTINATION)
    const created = await fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: await fx.quote(holder, '100', 'USDT') })
    const submitted = await fx.waitForState(created.body.id, 'submitted')
    const outcome = {
      withdrawalId: created.body.id,
      orgId: fx.org.id,
      status: 'completed' as const,
      evidence: { txHash: submitted.txHash, network: 'tron' as const, block: '42', confirmations: 19, confirmedAt: new Date(WALL_MS).toISOString() },
    }
    await Promise.all(Array.from({ length: 10 }, () => app.kassa.withdrawals.applyOutcome(outcome)))
    const completed = await fx.waitForState(created.body.id, 'confirmed')
    expect(completed.chainEvidence).toEqual(outcome.evidence)
    expect(await fx.balance(holder, 'USDT')).toMatchObject({ total: '898.850000', available: '898.850000', inFlight: '0.000000' })
    const completions = (await eventsOf(app, fx.org.id, 'treasury.withdrawal.completed')).filter((event) => event.data.id === created.body.id)
    expect(completions).toHaveLength(1)
    await expectVerified(app)
  })
})

describe('withdrawal refusals change nothing and leave the quote open', () => {
  test('an allowlist entry whose 24 h timelock has not elapsed is conflict', async () => {
    const holder = await fx.mint('impatient')
    await fx.fund(holder, '1000')
    const entry = (await fx.call('POST', `/v1/accounts/${holder}/allowlist`, { network: 'sui', address: SUI_DESTINATION })).body.id
    await fx.advance(DAY_SECONDS - 120)
    const quoteId = await fx.quote(holder, '100')
    const refused = await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId }), 409, 'conflict', 'allowlistEntryId')
    expect(refused.body.error.message).toContain('timelock')
    expect((await fx.call('GET', `/v1/quotes/${quoteId}`)).body.state).toBe('open')
    // Once the timelock has elapsed the same quote works (it is still open and unexpired).
    await fx.advance(30)
    expect((await fx.call('GET', `/v1/allowlist/${entry}`)).body.state).toBe('registered')
    await fx.advance(90)
    const newQuote = await fx.quote(holder, '100')
    expect((await fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: newQuote })).status).toBe(201)
  })

  test('an expired quote is quote_expired', async () => {
    const quoteId = await fx.quote(account, '100')
    await fx.advance(61)
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId }), 422, 'quote_expired', 'quoteId')
  })

  test('a quote already executed is quote_consumed', async () => {
    const quoteId = await fx.quote(account, '100')
    const first = await fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId })
    expect(first.status).toBe(201)
    await fx.waitForState(first.body.id, 'submitted')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId }), 409, 'quote_consumed', 'quoteId')
  })

  test('of many simultaneous withdrawals on one quote exactly one is made', async () => {
    const quoteId = await fx.quote(account, '100')
    const before = await fx.balance(account)
    const answers = await Promise.all(Array.from({ length: 10 }, () => fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId })))
    expect(answers.filter((answer) => answer.status === 201)).toHaveLength(1)
    expect(answers.filter((answer) => answer.status !== 201).map((answer) => answer.body.error.code)).toEqual(Array(9).fill('quote_consumed'))
    const after = await fx.balance(account)
    expect(Number(before.available) - Number(after.available)).toBeCloseTo(100.2, 6)
    await expectVerified(app)
  })

  test('a destination screened out after it was allowlisted is screening_rejected', async () => {
    const holder = await fx.mint('flagged')
    await fx.fund(holder, '1000', 'USDT')
    const entry = await fx.activeEntry(holder, 'tron', TRON_DESTINATION)
    const quoteId = await fx.quote(holder, '100', 'USDT')
    blockedLater.add(TRON_DESTINATION)
    try {
      await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId }), 422, 'screening_rejected', 'allowlistEntryId')
    } finally {
      blockedLater.delete(TRON_DESTINATION)
    }
    expect((await fx.call('GET', `/v1/quotes/${quoteId}`)).body.state).toBe('open')
  })

  test('more than available is insufficient_available', async () => {
    const holder = await fx.mint('poor')
    await fx.fund(holder, '50')
    const entry = await fx.activeEntry(holder, 'sui', SUI_DESTINATION)
    const quoteId = await fx.quote(holder, '50')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId }), 422, 'insufficient_available')
  })

  test('a frozen account is account_frozen', async () => {
    const holder = await fx.mint('frozen')
    await fx.fund(holder, '1000')
    const entry = await fx.activeEntry(holder, 'sui', SUI_DESTINATION)
    const quoteId = await fx.quote(holder, '100')
    await app.ops('POST', `/ops/v1/accounts/${holder}/freeze`)
    try {
      await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId }), 422, 'account_frozen', 'accountId')
    } finally {
      await app.ops('POST', `/ops/v1/accounts/${holder}/unfreeze`)
    }
  })

  test('an entry or a quote of another account, or an entry on another network, is invalid_request', async () => {
    const stranger = await fx.mint('stranger')
    await fx.fund(stranger, '1000')
    const strangerEntry = await fx.activeEntry(stranger, 'sui', SUI_DESTINATION)
    const tronEntry = await fx.activeEntry(account, 'tron', TRON_DESTINATION)
    const mine = await fx.quote(account, '100')
    const theirs = await fx.quote(stranger, '100')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: strangerEntry, quoteId: mine }), 400, 'invalid_request', 'allowlistEntryId')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId: theirs }), 400, 'invalid_request', 'quoteId')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: tronEntry, quoteId: mine }), 400, 'invalid_request', 'allowlistEntryId')
  })

  test('unknown or removed resources: not_found naming the field, conflict for a removed entry', async () => {
    const quoteId = await fx.quote(account, '100')
    const missing = 'alw_00000000000000000000000000000000'
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: missing, quoteId }), 404, 'not_found', 'allowlistEntryId')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: suiEntry, quoteId: 'qt_00000000000000000000000000000000' }), 404, 'not_found', 'quoteId')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: 'acct_00000000000000000000000000000000', allowlistEntryId: suiEntry, quoteId }), 404, 'not_found', 'accountId')
    const holder = await fx.mint('removed-entry')
    await fx.fund(holder, '1000')
    const entry = await fx.activeEntry(holder, 'sui', SUI_DESTINATION)
    expect((await fx.call('DELETE', `/v1/allowlist/${entry}`)).status).toBe(200)
    const holderQuote = await fx.quote(holder, '100')
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: holderQuote }), 409, 'conflict', 'allowlistEntryId')
  })

  test('a malformed body is invalid_request naming the field', async () => {
    await expectWithdrawalRefused(app, () => fx.withdraw({ accountId: account, allowlistEntryId: suiEntry } as never), 400, 'invalid_request', 'quoteId')
  })
})

describe('approval thresholds', () => {
  test('default to 10000 per asset; operators set and restore them', async () => {
    const other = await withdrawalFixture(app, 'Threshold Org')
    const initial = await app.ops('GET', `/ops/v1/orgs/${other.org.id}/withdrawal-approval`)
    expect(initial.body.thresholds).toEqual([
      { asset: 'USDC', threshold: '10000.000000', isDefault: true },
      { asset: 'USDT', threshold: '10000.000000', isDefault: true },
    ])
    const set = await app.ops('PUT', `/ops/v1/orgs/${other.org.id}/withdrawal-approval`, { asset: 'USDT', threshold: '0' })
    expect(set.body.thresholds[1]).toEqual({ asset: 'USDT', threshold: '0.000000', isDefault: false })
    const restored = await app.ops('PUT', `/ops/v1/orgs/${other.org.id}/withdrawal-approval`, { asset: 'USDT', threshold: null })
    expect(restored.body).toEqual(initial.body)
  })

  test('refuses a malformed threshold, an unsupported asset and an unknown organization', async () => {
    const bad = await app.ops('PUT', `/ops/v1/orgs/${fx.org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '1.1234567' })
    expect({ status: bad.status, code: bad.body.error.code, field: bad.body.error.field }).toEqual({ status: 400, code: 'invalid_request', field: 'threshold' })
    const asset = await app.ops('PUT', `/ops/v1/orgs/${fx.org.id}/withdrawal-approval`, { asset: 'BTC', threshold: '1' })
    expect({ status: asset.status, code: asset.body.error.code }).toEqual({ status: 422, code: 'unsupported_asset' })
    const org = await app.ops('PUT', '/ops/v1/orgs/org_00000000000000000000000000000000/withdrawal-approval', { asset: 'USDC', threshold: '1' })
    expect(org.status).toBe(404)
    expect((await app.ops('GET', `/ops/v1/orgs/${fx.org.id}/withdrawal-approval`)).body.thresholds[0]).toEqual({ asset: 'USDC', threshold: '500.000000', isDefault: false })
  })

  test('a threshold of 0 makes every withdrawal wait for approval; exactly the threshold does not wait', async () => {
    const other = await withdrawalFixture(app, 'Zero Threshold Org')
    const holder = await other.mint('zero')
    await other.fund(holder, '1000')
    const entry = await other.activeEntry(holder, 'sui', SUI_DESTINATION)
    await app.ops('PUT', `/ops/v1/orgs/${other.org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '0' })
    const small = await other.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: await other.quote(holder, '1') })
    expect(small.body.state).toBe('pending_approval')
    await app.ops('PUT', `/ops/v1/orgs/${other.org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '2' })
    const atThreshold = await other.withdraw({ accountId: holder, allowlistEntryId: entry, quoteId: await other.quote(holder, '2') })
    expect(atThreshold.body.state).toBe('approved')
  })
})

describe('reading withdrawals', () => {
  test('lists by account and state, and another organization cannot read them', async () => {
    const list = await fx.call('GET', `/v1/withdrawals?accountId=${account}&state=pending_approval&limit=200`)
    expect(list.status).toBe(200)
    expect(list.body.withdrawals.length).toBeGreaterThan(0)
    expect(list.body.withdrawals.every((entry: { state: string; accountId: string }) => entry.state === 'pending_approval' && entry.accountId === account)).toBe(true)
    const other = await withdrawalFixture(app, 'Reader Org')
    expect((await other.call('GET', `/v1/withdrawals/${list.body.withdrawals[0].id}`)).status).toBe(404)
    expect((await other.call('POST', `/v1/withdrawals/${list.body.withdrawals[0].id}/approve`)).status).toBe(404)
  })

  test('treasury.withdrawal.confirmed is never emitted', async () => {
    expect(await eventsOf(app, fx.org.id, 'treasury.withdrawal.confirmed')).toEqual([])
  })
})
