import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'

let app: TestApp
let org: TestOrg
let signingKey: CryptoKey
let registeredKeyId: string
let strangerKey: CryptoKey

beforeAll(async () => {
  app = await startTestApp()
  org = await app.createOrg()
  const pair = await generateKeyPair('EdDSA')
  signingKey = pair.privateKey
  strangerKey = (await generateKeyPair('EdDSA')).privateKey
  registeredKeyId = await registerKey(org, await exportJWK(pair.publicKey))
})
afterAll(async () => {
  await app.close()
})

async function registerKey(owner: TestOrg, jwk: JWK): Promise<string> {
  const response = await app.call('POST', '/v1/attestation-keys', {
    key: owner.testKey,
    body: { publicKey: { kty: jwk.kty, crv: jwk.crv, x: jwk.x } },
  })
  expect(response.status).toBe(201)
  return response.body.id
}

interface AttestationOptions {
  subject: string
  level?: string
  /** Seconds from the real now until expiry; negative for an already expired attestation. */
  expiresInSeconds?: number
  key?: CryptoKey
  kid?: string
}

async function attestation(options: AttestationOptions): Promise<string> {
  const nowSeconds = Math.floor(Date.now() / 1000)
  return new SignJWT({ level: options.level ?? 'basic' })
    .setProtectedHeader({ alg: 'EdDSA', kid: options.kid ?? registeredKeyId })
    .setSubject(options.subject)
    .setIssuedAt(nowSeconds)
    .setExpirationTime(nowSeconds + (options.expiresInSeconds ?? 3600))
    .sign(options.key ?? signingKey)
}

async function mintAccount(owner: TestOrg, externalId: string) {
  const response = await app.call('POST', '/v1/accounts', { key: owner.testKey, body: { externalId } })
  expect(response.status).toBe(201)
  return response.body as { id: string; externalId: string; kyc: unknown }
}

function attach(owner: TestOrg, accountId: string, token: string) {
  return app.call('POST', `/v1/accounts/${accountId}/kyc`, { key: owner.testKey, body: { attestation: token } })
}

async function readAccount(owner: TestOrg, accountId: string) {
  return (await app.call('GET', `/v1/accounts/${accountId}`, { key: owner.testKey })).body
}

describe('KYC attestations', () => {
  test('an attestation signed by a registered key records its level', async () => {
    const account = await mintAccount(org, 'kyc-ok')
    const response = await attach(org, account.id, await attestation({ subject: account.id, level: 'basic' }))
    expect(response.status).toBe(200)
    expect(response.body.kyc).toMatchObject({ level: 'basic', attestationKeyId: registeredKeyId })
    expect(Date.parse(response.body.kyc.expiresAt)).toBeGreaterThan(Date.now())
    expect((await readAccount(org, account.id)).kyc.level).toBe('basic')
  })

  test('the subject may be the externalId instead of the account id', async () => {
    const account = await mintAccount(org, 'kyc-by-external')
    const response = await attach(org, account.id, await attestation({ subject: 'kyc-by-external', level: 'enhanced' }))
    expect(response.status).toBe(200)
    expect(response.body.kyc.level).toBe('enhanced')
  })

  test('an attestation at mint time (kycAttestation) is verified and recorded', async () => {
    const token = await attestation({ subject: 'kyc-at-mint', level: 'full' })
    const response = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'kyc-at-mint', kycAttestation: token } })
    expect(response.status).toBe(201)
    expect(response.body.kyc).toMatchObject({ level: 'full', attestationKeyId: registeredKeyId })
  })

  test('minting an existing externalId with an attestation attaches it to that same account', async () => {
    const first = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'kyc-later' } })
    expect(first.status).toBe(201)
    expect(first.body.kyc).toBeNull()
    const token = await attestation({ subject: 'kyc-later', level: 'enhanced' })
    const again = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'kyc-later', kycAttestation: token } })
    expect(again.status).toBe(200)
    expect(again.body.id).toBe(first.body.id)
    expect(again.body.kyc).toMatchObject({ level: 'enhanced', attestationKeyId: registeredKeyId })
    const bad = await attestation({ subject: 'kyc-later', level: 'full', key: strangerKey })
    const refused = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'kyc-later', kycAttestation: bad } })
    expect(refused.status).toBe(400)
    expect(refused.body.error).toMatchObject({ code: 'invalid_request', field: 'kycAttestation' })
    const read = await app.call('GET', `/v1/accounts/${first.body.id}`, { key: org.testKey })
    expect(read.body.kyc.level).toBe('enhanced')
  })

  test('a bad attestation at mint time is refused naming kycAttestation and mints nothing', async () => {
    const token = await attestation({ subject: 'kyc-bad-mint', key: strangerKey })
    const response = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'kyc-bad-mint', kycAttestation: token } })
    expect(response.status).toBe(400)
    expect(response.body.error).toMatchObject({ code: 'invalid_request', field: 'kycAttestation' })
    const list = await app.call('GET', '/v1/accounts?externalId=kyc-bad-mint', { key: org.testKey })
    expect(list.body.accounts).toEqual([])
  })

  const refusals: Array<[string, (accountId: string) => Promise<string>]> = [
    ['signed by another key under the registered kid', (id) => attestation({ subject: id, key: strangerKey })],
    ['for another subject', () => attestation({ subject: 'acct_someone_else' })],
    ['already expired', (id) => attestation({ subject: id, expiresInSeconds: -60 })],
    ['naming a kid the organization does not have', (id) => attestation({ subject: id, kid: 'atk_unknown' })],
    ['without a level claim', (id) => attestation({ subject: id, level: '' })],
    ['that is not a JWS at all', async () => 'not-a-jws'],
  ]
  test.each(refusals)('an attestation %s is invalid_request on attestation and the account is unchanged', async (_name, makeToken) => {
    const account = await mintAccount(org, `kyc-refused-${Math.random().toString(36).slice(2, 10)}`)
    const response = await attach(org, account.id, await makeToken(account.id))
    expect(response.status).toBe(400)
    expect(response.body.error).toMatchObject({ code: 'invalid_request', field: 'attestation' })
    expect((await readAccount(org, account.id)).kyc).toBeNull()
  })

  test('a failed attestation leaves an earlier accepted one in place', async () => {
    const account = await mintAccount(org, 'kyc-keeps')
    expect((await attach(org, account.id, await attestation({ subject: account.id, level: 'basic' }))).status).toBe(200)
    const refused = await attach(org, account.id, await attestation({ subject: account.id, level: 'full', key: strangerKey }))
    expect(refused.status).toBe(400)
    expect((await readAccount(org, account.id)).kyc.level).toBe('basic')
  })

  test("another organization's registered key does not verify this organization's attestations", async () => {
    const other = await app.createOrg('Other KYC Org')
    const pair = await generateKeyPair('EdDSA')
    const otherKeyId = await registerKey(other, await exportJWK(pair.publicKey))
    const account = await mintAccount(org, 'kyc-foreign-key')
    const token = await attestation({ subject: account.id, key: pair.privateKey, kid: otherKeyId })
    const response = await attach(org, account.id, token)
    expect(response.status).toBe(400)
    expect(response.body.error.field).toBe('attestation')
    expect((await readAccount(org, account.id)).kyc).toBeNull()
  })

  test('a revoked attestation key no longer verifies', async () => {
    const pair = await generateKeyPair('EdDSA')
    const keyId = await registerKey(org, await exportJWK(pair.publicKey))
    const revoked = await app.call('DELETE', `/v1/attestation-keys/${keyId}`, { key: org.testKey })
    expect(revoked.status).toBe(200)
    expect(revoked.body.revokedAt).not.toBeNull()
    const account = await mintAccount(org, 'kyc-revoked-key')
    const response = await attach(org, account.id, await attestation({ subject: account.id, key: pair.privateKey, kid: keyId }))
    expect(response.status).toBe(400)
    expect((await readAccount(org, account.id)).kyc).toBeNull()
  })

  test('an attestation that expires once the organization clock is advanced is refused', async () => {
    // A separate organization, so advancing its clock cannot disturb the other tests.
    const clockOrg = await app.createOrg('Clock Org')
    const pair = await generateKeyPair('EdDSA')
    const keyId = await registerKey(clockOrg, await exportJWK(pair.publicKey))
    const account = await mintAccount(clockOrg, 'kyc-clock')
    const token = await attestation({ subject: account.id, key: pair.privateKey, kid: keyId, expiresInSeconds: 3600 })
    const advanced = await app.call('POST', '/v1/sandbox/clock/advance', { key: clockOrg.testKey, body: { seconds: 7200 } })
    expect(advanced.status).toBe(200)
    const response = await attach(clockOrg, account.id, token)
    expect(response.status).toBe(400)
    expect(response.body.error).toMatchObject({ code: 'invalid_request', field: 'attestation' })
    expect(response.body.error.message).toMatch(/expired/)
    expect((await readAccount(clockOrg, account.id)).kyc).toBeNull()
    // The same attestation is still good for an organization whose clock did not move.
    const stillGood = await mintAccount(org, 'kyc-clock-control')
    const control = await attestation({ subject: stillGood.id, expiresInSeconds: 3600 })
    expect((await attach(org, stillGood.id, control)).status).toBe(200)
  })

  test('registering a key that is not an Ed25519 public key is refused', async () => {
    const response = await app.call('POST', '/v1/attestation-keys', {
      key: org.testKey,
      body: { publicKey: { kty: 'OKP', crv: 'Ed25519', x: 'short' } },
    })
    expect(response.status).toBe(400)
    expect(response.body.error.code).toBe('invalid_request')
    expect(response.body.error.field).toBe('publicKey.x')
  })
})
