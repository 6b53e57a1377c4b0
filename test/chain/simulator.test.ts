import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sha256 } from '@noble/hashes/sha2.js'
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils.js'
import { newId } from '../../server/lib/ids.ts'
import type { OutgoingTransfer, WithdrawalOutcome } from '../../server/modules/chain/adapter.ts'
import { parseAddress } from '../../server/modules/chain/addresses.ts'
import { parseTxHash } from '../../server/modules/chain/networks.ts'
import { SandboxChain, UnconfiguredChain } from '../../server/modules/chain/simulator.ts'
import { AddressDeriver } from '../../server/modules/chain/derivation.ts'
import { ApiError } from '../../server/lib/errors.ts'
import { hexToBytes } from '@noble/hashes/utils.js'
import { SANDBOX_DEPOSIT_KEY_SEED_HEX } from '../../server/config.ts'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'

const WALL_CLOCK_MS = Date.UTC(2030, 0, 1)

let app: TestApp
let org: TestOrg
const outcomes: WithdrawalOutcome[] = []
/** Withdrawal ids whose delivery this instance's listener refuses, like a process dying mid-delivery. */
const refusing = new Set<string>()
const refused: string[] = []

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: () => WALL_CLOCK_MS })
  org = await app.createOrg('Chain Org')
  app.kassa.runtime.chain.onWithdrawalOutcome(async (outcome) => {
    if (refusing.has(outcome.withdrawalId)) {
      refused.push(outcome.withdrawalId)
      throw new Error('listener not ready')
    }
    outcomes.push(outcome)
  })
})
afterAll(async () => {
  await app.close()
})

const call = (method: string, path: string, body?: unknown) => app.call(method, path, { key: org.testKey, body })
const advance = async (seconds: number) => expect((await call('POST', '/v1/sandbox/clock/advance', { seconds })).status).toBe(200)
const outcomesOf = (withdrawalId: string) => outcomes.filter((outcome) => outcome.withdrawalId === withdrawalId)

function transfer(network: 'sui' | 'tron', amountMinor = 5_000_000n): OutgoingTransfer {
  return {
    withdrawalId: newId('wd'),
    orgId: org.id,
    network,
    asset: network === 'sui' ? 'USDC' : 'USDT',
    toAddress: network === 'sui' ? `0x${'ab'.repeat(32)}` : 'TPL66VK2gCXNCD7EJg9pgJRfqcRazjhUZY',
    amountMinor,
  }
}

describe('unsigned transactions', () => {
  test('are deterministic JSON with a SHA-256 digest, from the hot wallet to the destination', () => {
    const outgoing = transfer('tron')
    const first = app.kassa.runtime.chain.buildUnsignedTransaction(outgoing)
    expect(app.kassa.runtime.chain.buildUnsignedTransaction({ ...outgoing })).toEqual(first)
    expect(first.digest).toBe(bytesToHex(sha256(utf8ToBytes(first.payload))))
    const payload = JSON.parse(first.payload)
    expect(payload).toMatchObject({ network: 'tron', asset: 'USDT', to: outgoing.toAddress, amountMinor: '5000000', reference: outgoing.withdrawalId, token: 'TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t' })
    expect(parseAddress('tron', payload.from)).toBe(payload.from)
    expect(app.kassa.runtime.chain.buildUnsignedTransaction({ ...outgoing, amountMinor: 5_000_001n }).digest).not.toBe(first.digest)
  })

  test('refuse an invalid destination', () => {
    expect(() => app.kassa.runtime.chain.buildUnsignedTransaction({ ...transfer('sui'), toAddress: '0x2' })).toThrow()
  })
})

describe('withdrawals on the sandbox chain', () => {
  test('a second submission is the same broadcast', async () => {
    const outgoing = transfer('sui')
    const first = await app.kassa.runtime.chain.submitWithdrawal(outgoing)
    expect(parseTxHash('sui', first.txHash)).toBe(first.txHash)
    expect(await app.kassa.runtime.chain.submitWithdrawal(outgoing)).toEqual(first)
    expect((await call('GET', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}`)).body).toMatchObject({ state: 'submitted', txHash: first.txHash, confirmationsRequired: 1 })
  })

  test('a Tron withdrawal completes after 19 blocks with chain evidence, delivered once acknowledged', async () => {
    const outgoing = transfer('tron')
    const { txHash } = await app.kassa.runtime.chain.submitWithdrawal(outgoing)
    expect(parseTxHash('tron', txHash)).toBe(txHash)
    await advance(56)
    expect(outcomesOf(outgoing.withdrawalId)).toEqual([])
    expect((await call('GET', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}`)).body.state).toBe('submitted')
    await advance(1)
    const record = (await call('GET', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}`)).body
    expect(record).toMatchObject({ state: 'completed', failureReason: null })
    expect(outcomesOf(outgoing.withdrawalId)).toEqual([
      { withdrawalId: outgoing.withdrawalId, orgId: org.id, status: 'completed', evidence: { txHash, network: 'tron', block: record.block, confirmations: 19, confirmedAt: record.finalAt } },
    ])
    expect(Date.parse(record.finalAt) - Date.parse(record.submittedAt)).toBe(57_000)
    await (app.kassa.runtime.chain as SandboxChain).settleDue()
    expect(outcomesOf(outgoing.withdrawalId)).toHaveLength(1)
  })

  test('a test key makes a withdrawal fail before finality; the outcome is failed', async () => {
    const outgoing = transfer('sui')
    await app.kassa.runtime.chain.submitWithdrawal(outgoing)
    const failed = await call('POST', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}/fail`, { reason: 'out of gas' })
    expect(failed.status).toBe(200)
    expect(failed.body).toMatchObject({ state: 'submitted', failureReason: 'out of gas' })
    expect((await call('POST', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}/fail`, {})).body.error.code).toBe('conflict')
    await advance(1)
    expect(outcomesOf(outgoing.withdrawalId)).toEqual([{ withdrawalId: outgoing.withdrawalId, orgId: org.id, status: 'failed', reason: 'out of gas' }])
    expect((await call('GET', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}`)).body.state).toBe('failed')
  })

  test('failing is refused once final, before sending, for another organization, and for other keys', async () => {
    const outgoing = transfer('sui')
    await app.kassa.runtime.chain.submitWithdrawal(outgoing)
    await advance(1)
    const late = await call('POST', `/v1/sandbox/chain/withdrawals/${outgoing.withdrawalId}/fail`, {})
    expect({ status: late.status, code: late.body.error.code }).toEqual({ status: 409, code: 'conflict' })
    expect(outcomesOf(outgoing.withdrawalId)[0]!.status).toBe('completed')
    expect((await call('POST', `/v1/sandbox/chain/withdrawals/${newId('wd')}/fail`, {})).status).toBe(404)
    const other = await app.createOrg('Other Chain Org')
    const pending = transfer('tron')
    await app.kassa.runtime.chain.submitWithdrawal(pending)
    expect((await app.call('POST', `/v1/sandbox/chain/withdrawals/${pending.withdrawalId}/fail`, { key: other.testKey, body: {} })).status).toBe(404)
    expect((await app.call('POST', `/v1/sandbox/chain/withdrawals/${pending.withdrawalId}/fail`, { key: org.publishableKey, body: {} })).status).toBe(403)
    expect((await call('GET', `/v1/sandbox/chain/withdrawals/${pending.withdrawalId}`)).body).toMatchObject({ state: 'submitted', failureReason: null })
  })

  test('an outcome the listener did not finish is delivered again, also by a new instance after a restart', async () => {
    const outgoing = transfer('sui')
    await app.kassa.runtime.chain.submitWithdrawal(outgoing)
    refusing.add(outgoing.withdrawalId)
    await advance(1)
    expect(outcomesOf(outgoing.withdrawalId)).toEqual([])
    expect(refused).toContain(outgoing.withdrawalId)

    // A fresh simulator on the same database (what a restarted process builds) delivers it.
    const restarted = new SandboxChain(app.kassa.runtime.db, app.kassa.runtime.clock, app.kassa.runtime.addresses)
    const delivered: WithdrawalOutcome[] = []
    restarted.onWithdrawalOutcome(async (outcome) => {
      delivered.push(outcome)
    })
    await restarted.settleDue(org.id)
    expect(delivered.filter((outcome) => outcome.withdrawalId === outgoing.withdrawalId)).toHaveLength(1)
    // Acknowledged now: neither instance delivers it again.
    await restarted.settleDue(org.id)
    await (app.kassa.runtime.chain as SandboxChain).settleDue(org.id)
    expect(delivered.filter((outcome) => outcome.withdrawalId === outgoing.withdrawalId)).toHaveLength(1)
    expect(outcomesOf(outgoing.withdrawalId)).toEqual([])
    refusing.delete(outgoing.withdrawalId)
  })
})

describe('production has no simulator', () => {
  test('the unconfigured adapter builds the same unsigned transaction but refuses to send, so nothing completes with made-up evidence', async () => {
    const deriver = new AddressDeriver(hexToBytes(SANDBOX_DEPOSIT_KEY_SEED_HEX))
    const production = new UnconfiguredChain(deriver)
    const outgoing = transfer('tron')
    expect(production.buildUnsignedTransaction(outgoing)).toEqual(app.kassa.runtime.chain.buildUnsignedTransaction(outgoing))
    const refusal = await production.submitWithdrawal(outgoing).then(
      () => undefined,
      (error: unknown) => error,
    )
    expect(refusal).toBeInstanceOf(ApiError)
    expect((refusal as ApiError).code).toBe('partner_unavailable')
  })
})
