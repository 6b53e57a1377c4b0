import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { secp256k1 } from '@noble/curves/secp256k1.js'
import { keccak_256 } from '@noble/hashes/sha3.js'
import { bytesToHex } from '@noble/hashes/utils.js'
import { base64 } from '@scure/base'
import { evmAddressOf, MINT_LIFETIME_MS, transactionDigest } from '../../server/modules/sbt/mint-chain.ts'
import { INTENT_TRANSACTION, verifySuiSignature } from '../../server/modules/sbt/sui.ts'
import { newWallet, query, startSbtApp, type SbtTestApp, type Wallet } from './support.ts'

let s: SbtTestApp
let nowMs = Date.parse('2026-07-01T00:00:00Z')
const evmKey = secp256k1.utils.randomSecretKey()
const evmAddress = evmAddressOf(secp256k1.getPublicKey(evmKey))

beforeAll(async () => {
  s = await startSbtApp({}, { wallClockMs: () => nowMs })
  const imported = await s.importDocument({
    campaigns: [{ id: 'c', name: 'C' }],
    groups: [
      { id: 'g', campaignId: 'c', name: 'Two tasks' },
      { id: 'empty', campaignId: 'c', name: 'No tasks' },
    ],
    credentials: [
      { id: 'open', groupId: 'g', name: 'Open trade', labelType: 20 },
      { id: 'usdc', groupId: 'g', name: 'Hold USDC', labelType: 25, params: { fact: 'balance:USDC', min: '10' } },
    ],
    rewards: [
      { sbtId: 1, kind: 'social', groupId: 'g', level: 1, title: 'One', taskName: 'Both tasks', points: 10 },
      { sbtId: 2, kind: 'lockdrop', groupId: 'g', level: 2, title: 'Two', taskName: 'Both tasks', points: 20, usdRequired: 10 },
      { sbtId: 3, kind: 'social', groupId: 'empty', level: 1, title: 'Nothing', taskName: 'Nothing', points: 1 },
    ],
  })
  expect(imported.status).toBe(200)
}, 120_000)
afterAll(async () => {
  await s.close()
}, 30_000)

async function proof(wallet: Wallet) {
  return s.proof(wallet)
}
async function claim(wallet: Wallet, sbtId: unknown, path = '/sui/sbt/claim') {
  return s.sbt('POST', path, { body: { ...(await proof(wallet)), sbtId } })
}
async function check(wallet: Wallet, sbtId: number) {
  return s.sbt('POST', '/sui/sbt/claim/check', { body: { ...(await proof(wallet)), sbtId } })
}
async function claimType(wallet: Wallet, sbtId: number): Promise<number | undefined> {
  const rows = await query<{ claim_type: number }>(s.app, `select c.claim_type from sbt_claims c join sbt_users u on u.id = c.user_id where u.sui_address = '${wallet.address}' and c.sbt_id = ${sbtId}`)
  return rows[0] === undefined ? undefined : Number(rows[0].claim_type)
}
async function mints(wallet: Wallet): Promise<number> {
  return (await query(s.app, `select 1 from sbt_mints m join sbt_users u on u.id = m.user_id where u.sui_address = '${wallet.address}'`)).length
}
async function setUsdc(wallet: Wallet, amount: string) {
  expect((await s.app.ops('PUT', '/ops/v1/sbt/sandbox/chain-facts', { chain: 'sui', address: wallet.address, fact: 'balance:USDC', amount })).status).toBe(200)
}
/** A user who verified both credentials of group g. */
async function qualifiedUser(): Promise<Wallet> {
  const wallet = newWallet()
  await setUsdc(wallet, '10')
  for (const id of ['open', 'usdc']) {
    const verified = await s.sbt('POST', `/campaignNew/credential/${id}/verify`, { body: await proof(wallet) })
    expect(verified.body.data.status).toBe(1)
  }
  return wallet
}
async function execute(wallet: Wallet, transaction: any) {
  return s.sbt('POST', '/sandbox/chain/execute', { body: { txBytes: transaction.txBytes, userSignature: wallet.signTransaction(base64.decode(transaction.txBytes)), sponsorSignature: transaction.sponsorSignature } })
}

describe('POST /sui/sbt/claim', () => {
  test('refuses a user missing a credential with 422 code 42201 naming it, and writes nothing', async () => {
    const wallet = newWallet()
    await s.sbt('POST', '/campaignNew/credential/open/verify', { body: await proof(wallet) })
    const response = await claim(wallet, 1)
    expect(response.status).toBe(422)
    expect(response.body.code).toBe(42201)
    expect(response.body.message).toContain('usdc')
    expect(await claimType(wallet, 1)).toBeUndefined()
    expect(await mints(wallet)).toBe(0)
  })

  test('moves an eligible record 2 → 3 and answers a sponsored transaction signed by the sandbox sponsor', async () => {
    const wallet = await qualifiedUser()
    expect(await claimType(wallet, 1)).toBe(2)
    const response = await claim(wallet, 1)
    expect(response.status).toBe(200)
    expect(response.body.code).toBe(0)
    const { data } = response.body
    expect(data.sbtId).toBe(1)
    expect(data.claimType).toBe(3)
    const transaction = data.transaction
    const bytes = base64.decode(transaction.txBytes)
    const payload = JSON.parse(new TextDecoder().decode(bytes))
    expect(payload).toMatchObject({ kind: 'sbt_mint', chain: 'sui-sandbox', sender: wallet.address, sponsor: transaction.sponsor, sbtId: 1 })
    expect(transaction.digest).toBe(transactionDigest('sui', bytes))
    expect(verifySuiSignature(transaction.sponsorSignature, INTENT_TRANSACTION, bytes, transaction.sponsor)).toBe(true)
    expect(verifySuiSignature(transaction.sponsorSignature, INTENT_TRANSACTION, bytes, wallet.address)).toBe(false)
    expect(await claimType(wallet, 1)).toBe(3)
    expect(await mints(wallet)).toBe(1)
  })

  test('tolerates duplicate result rows, and trusts them after the task is undone (no live re-verification)', async () => {
    const wallet = await qualifiedUser()
    await s.sbt('POST', '/campaignNew/credential/open/verify', { body: await proof(wallet) })
    await s.sbt('POST', '/campaignNew/credential/usdc/verify', { body: await proof(wallet) })
    expect((await query(s.app, `select 1 from sbt_credential_results x join sbt_users u on u.id = x.user_id where u.sui_address = '${wallet.address}'`)).length).toBe(4)
    // The user sells the token: a live check would now fail.
    await setUsdc(wallet, '0')
    expect((await s.sbt('POST', '/campaignNew/credential/usdc/verify', { body: await proof(wallet) })).body.data.status).toBe(0)
    const response = await claim(wallet, 2)
    expect(response.status).toBe(200)
    expect(response.body.data.claimType).toBe(3)
  })

  test('a second claim while minting is 409 code 40902, and builds no second mint', async () => {
    const wallet = await qualifiedUser()
    expect((await claim(wallet, 1)).status).toBe(200)
    const again = await claim(wallet, 1)
    expect(again.status).toBe(409)
    expect(again.body.code).toBe(40902)
    expect(await mints(wallet)).toBe(1)
  })

  test('two claims at once: one mint, the other refused', async () => {
    const wallet = await qualifiedUser()
    const [first, second] = await Promise.all([proof(wallet), proof(wallet)])
    const answers = await Promise.all([
      s.sbt('POST', '/sui/sbt/claim', { body: { ...first, sbtId: 1 } }),
      s.sbt('POST', '/sui/sbt/claim', { body: { ...second, sbtId: 1 } }),
    ])
    expect(answers.map((answer) => answer.status).sort()).toEqual([200, 409])
    expect(await mints(wallet)).toBe(1)
  })

  test('the whole way: claim, the user signs and the sandbox chain executes, check confirms 3 → 4, a further claim is 40901', async () => {
    const wallet = await qualifiedUser()
    const claimed = await claim(wallet, 1)
    const pending = await check(wallet, 1)
    expect(pending.body.data).toMatchObject({ claimType: 3, mint: 'pending' })
    const executed = await execute(wallet, claimed.body.data.transaction)
    expect(executed.status).toBe(200)
    expect(executed.body.data).toEqual({ digest: claimed.body.data.transaction.digest, status: 'executed' })
    const confirmed = await check(wallet, 1)
    expect(confirmed.status).toBe(200)
    expect(confirmed.body.data).toEqual({ sbtId: 1, claimType: 4, txDigest: claimed.body.data.transaction.digest, mint: 'executed' })
    expect(await claimType(wallet, 1)).toBe(4)
    const record = await s.sbt('GET', `/gonative/user?address=${wallet.address}`)
    expect(record.body.data.claimedSocialSbts.map((item: { sbtId: number }) => item.sbtId)).toEqual([1])
    const again = await claim(wallet, 1)
    expect(again.status).toBe(409)
    expect(again.body.code).toBe(40901)
    expect(await mints(wallet)).toBe(1)
    // Executing the same transaction twice is refused by the chain too.
    expect((await execute(wallet, claimed.body.data.transaction)).status).toBe(409)
  })

  test('the chain refuses a transaction not signed by its sender', async () => {
    const wallet = await qualifiedUser()
    const claimed = await claim(wallet, 1)
    const response = await execute(newWallet(), claimed.body.data.transaction)
    expect(response.status).toBe(401)
    expect(response.body.code).toBe(40104)
    expect((await check(wallet, 1)).body.data.claimType).toBe(3)
  })

  test('a mint that expires unexecuted is missed (3 → 5); the user may then claim again', async () => {
    const wallet = await qualifiedUser()
    const claimed = await claim(wallet, 1)
    nowMs += MINT_LIFETIME_MS + 1
    const missed = await check(wallet, 1)
    expect(missed.body.data).toMatchObject({ claimType: 5, mint: 'failed' })
    expect(await claimType(wallet, 1)).toBe(5)
    expect((await execute(wallet, claimed.body.data.transaction)).status).toBe(409)
    const retried = await claim(wallet, 1)
    expect(retried.status).toBe(200)
    expect(retried.body.data.transaction.digest).not.toBe(claimed.body.data.transaction.digest)
    expect(await claimType(wallet, 1)).toBe(3)
  })

  test('an imported holder (claimType 4) cannot claim again', async () => {
    const wallet = await qualifiedUser()
    await s.importDocument({ claims: [{ suiAddress: wallet.address, sbtId: 1, claimType: 4 }] })
    const response = await claim(wallet, 1)
    expect(response.status).toBe(409)
    expect(response.body.code).toBe(40901)
  })

  test.each([
    [999, 404, 40403],
    [0, 400, 40001],
    ['1', 400, 40001],
    [undefined, 400, 40001],
  ])('sbtId %p is refused with %d code %d', async (sbtId, status, code) => {
    const response = await claim(newWallet(), sbtId)
    expect(response.status).toBe(status)
    expect(response.body.code).toBe(code)
  })

  test('a reward whose group has no credentials is never claimable', async () => {
    const response = await claim(newWallet(), 3)
    expect(response.status).toBe(422)
    expect(response.body.code).toBe(42201)
  })

  test('check of an SBT never claimed is 404 code 40404', async () => {
    const response = await check(newWallet(), 1)
    expect(response.status).toBe(404)
    expect(response.body.code).toBe(40404)
  })
})

describe('POST /evm-sbt/sbt/claim', () => {
  test('has the same gating', async () => {
    const wallet = newWallet()
    const response = await claim(wallet, 1, '/evm-sbt/sbt/claim')
    expect(response.status).toBe(422)
    expect(response.body.code).toBe(42201)
  })

  test('needs a bound EVM wallet (422 code 42203)', async () => {
    const wallet = await qualifiedUser()
    const response = await claim(wallet, 1, '/evm-sbt/sbt/claim')
    expect(response.status).toBe(422)
    expect(response.body.code).toBe(42203)
  })

  test('builds an EVM transaction for the bound wallet, signed by the sponsor; executed and checked it is claimed', async () => {
    const wallet = await qualifiedUser()
    await s.importDocument({ users: [{ suiAddress: wallet.address, inviteCode: `evm-${wallet.address.slice(2, 12)}`, bindings: { evm: evmAddress } }] })
    const response = await claim(wallet, 1, '/evm-sbt/sbt/claim')
    expect(response.status).toBe(200)
    const transaction = response.body.data.transaction
    expect(transaction.rail).toBe('evm')
    expect(transaction.sender).toBe(evmAddress)
    const bytes = base64.decode(transaction.txBytes)
    const recovered = evmAddressOf(secp256k1.recoverPublicKey(Buffer.from(transaction.sponsorSignature.slice(2), 'hex'), keccak_256(bytes), { prehash: false }))
    expect(recovered).toBe(transaction.sponsor)
    const userSignature = `0x${bytesToHex(secp256k1.sign(keccak_256(bytes), evmKey, { prehash: false, format: 'recovered' }))}`
    const executed = await s.sbt('POST', '/sandbox/chain/execute', { body: { txBytes: transaction.txBytes, userSignature, sponsorSignature: transaction.sponsorSignature } })
    expect(executed.status).toBe(200)
    const confirmed = await check(wallet, 1)
    expect(confirmed.body.data).toMatchObject({ claimType: 4, mint: 'executed' })
  })
})
