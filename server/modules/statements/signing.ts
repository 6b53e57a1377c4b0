import { asc } from 'drizzle-orm'
import { calculateJwkThumbprint, CompactSign, exportJWK, generateKeyPair, importJWK, type JSONWebKeySet, type JWK } from 'jose'
import type { Database } from '../../../db/client.ts'
import { statementSigningKeys } from '../../../db/schema/index.ts'
import { assert } from '../../lib/assert.ts'

/** The JWS header's `typ`: says what a signature is for, so it is never taken for another kind of token. */
export const STATEMENT_JWS_TYPE = 'kassa-statement+jws'

interface SigningKey {
  kid: string
  publicJwk: JWK
  privateKey: CryptoKey | Uint8Array
  createdAt: Date
}

/**
 * The platform's statement signing keys (Ed25519), kept in the database so every instance signs
 * with the same newest key. A rotation adds a key; none is ever removed, so statements signed
 * before it keep verifying against the JWKS.
 */
export class StatementKeyRing {
  private keys: SigningKey[] = []

  constructor(
    private readonly db: Database,
    private readonly wallNow: () => Date,
  ) {}

  /** Reads every key; makes the first one when there is none. */
  async load(): Promise<void> {
    await this.reload()
    if (this.keys.length === 0) {
      await this.rotate()
    }
  }

  private async reload(): Promise<void> {
    const rows = await this.db.select().from(statementSigningKeys).orderBy(asc(statementSigningKeys.createdAt), asc(statementSigningKeys.kid))
    const known = new Map(this.keys.map((key) => [key.kid, key]))
    const keys: SigningKey[] = []
    for (const row of rows) {
      const existing = known.get(row.kid)
      if (existing) {
        keys.push(existing)
        continue
      }
      const privateKey = await importJWK(row.privateJwk as JWK, 'EdDSA')
      keys.push({ kid: row.kid, publicJwk: row.publicJwk as JWK, privateKey, createdAt: row.createdAt })
    }
    this.keys = keys
  }

  /** Adds a new key, which signs from now on; answers its id. Other instances take it at their next seal. */
  async rotate(): Promise<{ kid: string; createdAt: string }> {
    const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true })
    const publicJwk = await exportJWK(publicKey)
    const privateJwk = await exportJWK(privateKey)
    const kid = await calculateJwkThumbprint(publicJwk)
    const createdAt = this.wallNow()
    // A key made in the same millisecond as the newest would tie with it; the newest must be this one.
    const newest = this.keys.at(-1)
    const at = newest && newest.createdAt.getTime() >= createdAt.getTime() ? new Date(newest.createdAt.getTime() + 1) : createdAt
    await this.db.insert(statementSigningKeys).values({ kid, publicJwk, privateJwk, createdAt: at })
    await this.reload()
    return { kid, createdAt: at.toISOString() }
  }

  /** Takes keys another instance added (a rotation there). */
  async refresh(): Promise<void> {
    await this.reload()
  }

  current(): SigningKey {
    const key = this.keys.at(-1)
    assert(key !== undefined, 'the statement key ring is loaded before it signs')
    return key
  }

  /** A compact JWS (EdDSA) over the statement's hash, by the current key. */
  async sign(key: SigningKey, hash: string): Promise<string> {
    return new CompactSign(new TextEncoder().encode(hash)).setProtectedHeader({ alg: 'EdDSA', kid: key.kid, typ: STATEMENT_JWS_TYPE }).sign(key.privateKey)
  }

  /** Every public key, oldest first, as a JWK Set. */
  jwks(): JSONWebKeySet & { keys: Array<{ kty: string; crv: string; x: string; kid: string; alg: string; use: string }> } {
    return {
      keys: this.keys.map((key) => ({ kty: String(key.publicJwk.kty), crv: String(key.publicJwk.crv), x: String(key.publicJwk.x), kid: key.kid, alg: 'EdDSA', use: 'sig' })),
    }
  }

  list(): Array<{ kid: string; createdAt: string; current: boolean }> {
    const current = this.keys.at(-1)?.kid
    return this.keys.map((key) => ({ kid: key.kid, createdAt: key.createdAt.toISOString(), current: key.kid === current }))
  }
}
