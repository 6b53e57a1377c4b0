import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Validator } from '@seriousme/openapi-schema-validator'
import { ConfigError, loadConfig } from '../../server/config.ts'
import { sha256Hex } from '../../server/lib/hash.ts'
import { SbtTokens } from '../../server/modules/sbt/tokens.ts'
import { CHALLENGE_LIFETIME_MS } from '../../server/modules/sbt/user-auth.ts'
import { fakeAddress, newWallet, query, startSbtApp, type SbtTestApp } from './support.ts'

let s: SbtTestApp
let nowMs = Date.parse('2026-06-01T00:00:00Z')
const known = fakeAddress(0x5)

beforeAll(async () => {
  s = await startSbtApp({}, { wallClockMs: () => nowMs })
  await s.importDocument({
    campaigns: [{ id: 'c', name: 'C' }],
    groups: [{ id: 'g', campaignId: 'c', name: 'G' }],
    credentials: [{ id: 'open', groupId: 'g', name: 'Open trade', labelType: 20 }],
    users: [{ suiAddress: known, inviteCode: 'known' }],
  })
}, 120_000)
afterAll(async () => {
  await s.close()
}, 30_000)

describe('the service token', () => {
  test('is required on every endpoint: no header is 401 with code 40101', async () => {
    for (const path of [`/gonative/user?address=${known}`, '/gonative/all-users']) {
      const response = await s.sbt('GET', path, { token: null })
      expect(response.status).toBe(401)
      expect(response.body).toEqual({ code: 40101, message: expect.any(String), data: null })
    }
    const post = await s.sbt('POST', '/sui/sbt/claim', { token: null, body: { sbtId: 1 } })
    expect(post.status).toBe(401)
    expect(post.body.code).toBe(40101)
  })

  test('is sent as the token itself: an unknown token, or the token behind a scheme word, is 401 with code 40102', async () => {
    for (const header of ['sbt_staging_nope', `Bearer ${s.token}`, `${s.token}x`]) {
      const response = await s.sbt('GET', '/gonative/all-users', { token: header })
      expect(response.status).toBe(401)
      expect(response.body.code).toBe(40102)
    }
    expect((await s.sbt('GET', '/gonative/all-users')).status).toBe(200)
  })

  test('is stored as its SHA-256 only, and never listed', async () => {
    const rows = await query<{ token_hash: string }>(s.app, 'select * from sbt_tokens')
    expect(rows.some((row) => row.token_hash === sha256Hex(s.token))).toBe(true)
    expect(JSON.stringify(rows)).not.toContain(s.token)
    const listed = await s.app.ops('GET', '/ops/v1/sbt/tokens')
    expect(listed.status).toBe(200)
    expect(JSON.stringify(listed.body)).not.toContain(s.token)
    expect(listed.body.tokens[0]).toMatchObject({ environment: 'staging', revokedAt: null })
  })

  test('a revoked token is refused on the very next request', async () => {
    const issued = await s.app.ops('POST', '/ops/v1/sbt/tokens', { environment: 'staging', label: 'to revoke' })
    expect(issued.body.token).toStartWith('sbt_staging_')
    expect((await s.sbt('GET', '/gonative/all-users', { token: issued.body.token })).status).toBe(200)
    const revoked = await s.app.ops('POST', `/ops/v1/sbt/tokens/${issued.body.id}/revoke`)
    expect(revoked.status).toBe(200)
    expect(revoked.body.revokedAt).toEqual(expect.any(String))
    const refused = await s.sbt('GET', '/gonative/all-users', { token: issued.body.token })
    expect(refused.status).toBe(401)
    expect(refused.body.code).toBe(40102)
    expect(refused.body.message).toContain('revoked')
    expect((await s.app.ops('POST', '/ops/v1/sbt/tokens/sbtk_nope/revoke')).status).toBe(404)
  })

  test('staging and production tokens are never interchangeable', async () => {
    const production = await s.app.ops('POST', '/ops/v1/sbt/tokens', { environment: 'production', label: 'prod' })
    expect(production.body.token).toStartWith('sbt_production_')
    const onStaging = await s.sbt('GET', '/gonative/all-users', { token: production.body.token })
    expect(onStaging.status).toBe(401)
    expect(onStaging.body.code).toBe(40103)
    // A production deployment's check, on the same stored tokens, refuses the staging one.
    const productionTokens = new SbtTokens(s.app.kassa.runtime.db, 'production')
    await productionTokens.authenticate(production.body.token)
    await expect(productionTokens.authenticate(s.token)).rejects.toMatchObject({ kind: 'wrong_environment', code: 40103 })
  })

  test('an unknown environment is refused at issue', async () => {
    const response = await s.app.ops('POST', '/ops/v1/sbt/tokens', { environment: 'sandbox' })
    expect(response.status).toBe(400)
    expect(response.body.error.field).toBe('environment')
  })

  test('the token routes need the operator token', async () => {
    const response = await s.app.call('POST', '/ops/v1/sbt/tokens', { body: { environment: 'staging' } })
    expect(response.status).toBe(401)
  })
})

describe('the end user wallet proof', () => {
  const verify = (proof: unknown) => s.sbt('POST', '/campaignNew/credential/open/verify', { body: proof })

  test('a Sui personal-message signature over a fresh challenge signs the user in (and creates them)', async () => {
    const wallet = newWallet()
    const response = await verify(await s.proof(wallet))
    expect(response.status).toBe(200)
    expect(response.body.data).toEqual({ credentialId: 'open', labelType: 20, status: 1, reason: null })
    const [user] = await query<{ sui_address: string }>(s.app, `select sui_address from sbt_users where sui_address = '${wallet.address}'`)
    expect(user).toBeDefined()
  })

  test('a challenge is single use', async () => {
    const proof = await s.proof(newWallet())
    expect((await verify(proof)).status).toBe(200)
    const again = await verify(proof)
    expect(again.status).toBe(401)
    expect(again.body.code).toBe(40105)
  })

  test('a signature by another wallet is refused with 40104, and writes nothing', async () => {
    const wallet = newWallet()
    const other = newWallet()
    const challenge = await s.sbt('POST', '/auth/challenge', { body: { address: wallet.address } })
    const response = await verify({ address: wallet.address, nonce: challenge.body.data.nonce, signature: other.signMessage(challenge.body.data.message) })
    expect(response.status).toBe(401)
    expect(response.body.code).toBe(40104)
    expect(await query(s.app, `select 1 from sbt_users where sui_address = '${wallet.address}'`)).toEqual([])
  })

  test('a signature over another message, or a malformed one, is refused with 40104', async () => {
    const wallet = newWallet()
    const challenge = await s.sbt('POST', '/auth/challenge', { body: { address: wallet.address } })
    const nonce = challenge.body.data.nonce
    expect((await verify({ address: wallet.address, nonce, signature: wallet.signMessage(`${challenge.body.data.message}!`) })).body.code).toBe(40104)
    expect((await verify({ address: wallet.address, nonce, signature: 'AAAA' })).body.code).toBe(40104)
    // The challenge is still good after refused attempts.
    expect((await verify({ address: wallet.address, nonce, signature: wallet.signMessage(challenge.body.data.message) })).status).toBe(200)
  })

  test('a challenge asked for one address does not sign in another', async () => {
    const wallet = newWallet()
    const proof = await s.proof(wallet)
    const response = await verify({ ...proof, address: newWallet().address })
    expect(response.status).toBe(401)
    expect(response.body.code).toBe(40105)
  })

  test('a challenge expires after five minutes', async () => {
    const wallet = newWallet()
    const proof = await s.proof(wallet)
    nowMs += CHALLENGE_LIFETIME_MS + 1
    const response = await verify(proof)
    expect(response.status).toBe(401)
    expect(response.body.code).toBe(40105)
  })

  test('missing proof fields are 400 naming the field', async () => {
    const wallet = newWallet()
    const noNonce = await verify({ address: wallet.address, signature: 'x' })
    expect(noNonce.status).toBe(400)
    expect(noNonce.body.code).toBe(40001)
    expect(noNonce.body.message).toContain('nonce')
    expect((await verify({ nonce: 'n', signature: 'x' })).body.code).toBe(40002)
    expect((await s.sbt('POST', '/campaignNew/credential/open/verify', { rawBody: '{not json' })).body.code).toBe(40001)
  })

  test('an invite code given with the challenge records the inviter of a new user', async () => {
    const wallet = newWallet()
    expect((await verify(await s.proof(wallet, 'known'))).status).toBe(200)
    const record = await s.sbt('GET', `/gonative/user?address=${known}`)
    expect(record.body.data.invitees).toEqual([{ suiAddress: wallet.address, inviteDate: new Date(nowMs).toISOString() }])
  })
})

describe('the listener', () => {
  test('serves the contract over a real socket, and its OpenAPI 3.1 document without a token', async () => {
    const port = s.app.kassa.sbt.start(0)
    try {
      const base = `http://127.0.0.1:${port}`
      const refused = await fetch(`${base}/gonative/all-users`)
      expect(refused.status).toBe(401)
      expect(((await refused.json()) as { code: number }).code).toBe(40101)
      const page = await fetch(`${base}/gonative/all-users?page=1&pageSize=5`, { headers: { authorization: s.token } })
      expect(page.status).toBe(200)
      expect(((await page.json()) as any).data.pagination.currentPage).toBe(1)
      const documentResponse = await fetch(`${base}/openapi.json`)
      expect(documentResponse.status).toBe(200)
      const document = (await documentResponse.json()) as any
      const result = await new Validator().validate(document)
      expect(result.errors).toBeUndefined()
      expect(result.valid).toBe(true)
      expect(document.openapi).toBe('3.1.0')
      expect(Object.keys(document.paths)).toEqual(
        expect.arrayContaining(['/gonative/user', '/gonative/all-users', '/campaignNew/credential/{id}/verify', '/sui/sbt/claim', '/evm-sbt/sbt/claim', '/sui/sbt/claim/check']),
      )
    } finally {
      await s.app.kassa.sbt.stop()
    }
  })
})

describe('configuration', () => {
  test('SBT_PORT is PORT + 1 by default, any free port beside PORT=0, and validated', () => {
    expect(loadConfig({ PORT: '4000' }).sbtPort).toBe(4001)
    expect(loadConfig({ PORT: '0' }).sbtPort).toBe(0)
    expect(loadConfig({ PORT: '4000', SBT_PORT: '5000' }).sbtPort).toBe(5000)
    expect(() => loadConfig({ SBT_PORT: 'abc' })).toThrow(ConfigError)
    expect(() => loadConfig({ SBT_PORT: '70000' })).toThrow(ConfigError)
    expect(() => loadConfig({ PORT: '4000', SBT_PORT: '4000' })).toThrow('SBT_PORT must differ from PORT')
  })

  test('SBT_REFERRAL_BASE_URL must be an http(s) URL without query or fragment', () => {
    expect(loadConfig({ SBT_REFERRAL_BASE_URL: 'https://app.example.com/' }).sbtReferralBaseUrl).toBe('https://app.example.com')
    expect(() => loadConfig({ SBT_REFERRAL_BASE_URL: 'ftp://x' })).toThrow(ConfigError)
    expect(() => loadConfig({ SBT_REFERRAL_BASE_URL: 'https://x/?a=1' })).toThrow(ConfigError)
    expect(() => loadConfig({ SBT_VERIFY_TIMEOUT_MS: '10' })).toThrow(ConfigError)
  })
})
