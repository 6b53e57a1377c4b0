import { errors as joseErrors, decodeProtectedHeader, importJWK, jwtVerify } from 'jose'
import { ApiError, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { Clock } from '../clock/clock.ts'
import { appendEvent } from '../events/writer.ts'
import type { AccountView, AttestationKeyView, CreateAccountInput } from './model.ts'
import * as repo from './repo.ts'

/** What the accounts services work with. */
export interface AccountsContext {
  db: Database
  /** A new account is registered with the hot balances at once. */
  ledger: Ledger
  clock: Clock
}

const ATTESTATION_FIELD = 'attestation'
/** An attestation may not claim to be valid for longer than this. */
const ATTESTATION_LIFETIME_MAX_SECONDS = 400 * 24 * 3600

export function toAccountView(row: repo.AccountRow): AccountView {
  return {
    id: row.id,
    externalId: row.externalId,
    type: row.type,
    status: row.status,
    metadata: row.metadata,
    kyc:
      row.kycLevel !== null && row.kycVerifiedAt !== null && row.kycExpiresAt !== null && row.kycAttestationKeyId !== null
        ? {
            level: row.kycLevel,
            verifiedAt: row.kycVerifiedAt.toISOString(),
            expiresAt: row.kycExpiresAt.toISOString(),
            attestationKeyId: row.kycAttestationKeyId,
          }
        : null,
    createdAt: row.createdAt.toISOString(),
  }
}

export async function requireAccount(context: AccountsContext, orgId: string, accountId: string): Promise<repo.AccountRow> {
  // Another organization's account answers exactly like a missing one.
  const row = await repo.findAccount(context.db, orgId, accountId)
  if (!row) throw notFound('account')
  return row
}

/**
 * Mints an account for `externalId`, or answers the one that exists (`created: false`). The
 * `account.created` event is written in the same transaction as the account.
 */
export async function mintAccount(context: AccountsContext, orgId: string, input: CreateAccountInput): Promise<{ account: AccountView; created: boolean }> {
  const existing = await repo.findAccountByExternalId(context.db, orgId, input.externalId)
  if (existing) {
    // Minting again with an attestation is how a partner records KYC it finished later: the
    // attestation is verified and attached exactly as POST /v1/accounts/{id}/kyc would.
    if (input.kycAttestation === undefined) return { account: toAccountView(existing), created: false }
    const kyc = await verifyAttestation(context, orgId, input.kycAttestation, [existing.id, existing.externalId], 'kycAttestation')
    const updated = await repo.updateAccount(context.db, orgId, existing.id, kyc)
    return { account: toAccountView(updated!), created: false }
  }
  const now = context.clock.now(orgId)
  const kyc = input.kycAttestation === undefined ? undefined : await verifyAttestation(context, orgId, input.kycAttestation, [input.externalId], 'kycAttestation')
  const inserted = await context.db.transaction(async (tx) => {
    const row = await repo.insertAccountIfAbsent(tx, {
      id: newId('acct'),
      orgId,
      externalId: input.externalId,
      type: input.type ?? 'individual',
      metadata: input.metadata ?? {},
      createdAt: now,
      ...(kyc ?? {}),
    })
    if (row) {
      await appendEvent(tx, {
        orgId,
        type: 'account.created',
        data: { accountId: row.id, externalId: row.externalId, type: row.type },
        created: now,
      })
    }
    return row
  })
  if (inserted) {
    // A new account has no balance rows: it is resident at once, with nothing to read on first use.
    context.ledger.accounts.registerNew({ id: inserted.id, orgId: inserted.orgId, externalId: inserted.externalId, status: inserted.status })
    return { account: toAccountView(inserted), created: true }
  }
  // A concurrent mint of the same externalId won the race; answer its account.
  const winner = await repo.findAccountByExternalId(context.db, orgId, input.externalId)
  if (!winner) throw new Error('account insert conflicted but no account exists')
  return { account: toAccountView(winner), created: false }
}

export async function getAccount(context: AccountsContext, orgId: string, accountId: string): Promise<AccountView> {
  return toAccountView(await requireAccount(context, orgId, accountId))
}

export async function listAccounts(
  context: AccountsContext,
  orgId: string,
  query: { externalId?: string; after?: string; limit?: number },
): Promise<{ accounts: AccountView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const rows = await repo.listAccounts(context.db, orgId, { externalId: query.externalId, after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toAccountView)
  return { accounts: page.items, hasMore: page.hasMore }
}

interface VerifiedKyc {
  kycLevel: string
  kycVerifiedAt: Date
  kycExpiresAt: Date
  kycAttestationKeyId: string
}

function attestationError(message: string, field: string): ApiError {
  return new ApiError('invalid_request', message, { field })
}

/**
 * Verifies a compact JWS attestation against the organization's registered Ed25519 keys. The
 * subject must be one of `subjects` (the account id or its externalId), and the organization's
 * clock decides expiry.
 */
async function verifyAttestation(
  context: AccountsContext,
  orgId: string,
  attestation: string,
  subjects: string[],
  field: string,
): Promise<VerifiedKyc> {
  let header: ReturnType<typeof decodeProtectedHeader>
  try {
    header = decodeProtectedHeader(attestation)
  } catch {
    throw attestationError('The attestation is not a compact JWS', field)
  }
  if (header.alg !== 'EdDSA' && header.alg !== 'Ed25519') throw attestationError('The attestation must be signed with EdDSA (Ed25519)', field)
  const keys = await repo.listAttestationKeys(context.db, orgId, true)
  const candidates = header.kid === undefined ? keys : keys.filter((key) => key.id === header.kid)
  if (candidates.length === 0) throw attestationError('No active attestation key of this organization matches the attestation', field)
  const now = context.clock.now(orgId)
  for (const key of candidates) {
    const publicKey = await importJWK(key.publicKeyJwk, 'EdDSA')
    let payload: Awaited<ReturnType<typeof jwtVerify>>['payload']
    try {
      ;({ payload } = await jwtVerify(attestation, publicKey, { algorithms: ['EdDSA', 'Ed25519'], currentDate: now, requiredClaims: ['sub', 'exp'] }))
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) throw attestationError('The attestation has expired', field)
      if (error instanceof joseErrors.JWSSignatureVerificationFailed) continue
      if (error instanceof joseErrors.JWTClaimValidationFailed) throw attestationError(`The attestation's ${error.claim} claim is invalid: ${error.reason}`, field)
      throw attestationError('The attestation could not be verified', field)
    }
    if (!subjects.includes(String(payload.sub))) throw attestationError('The attestation is for a different subject', field)
    const level = payload.level
    if (typeof level !== 'string' || level.length === 0 || level.length > 64) throw attestationError('The attestation must carry a level claim (a string)', field)
    const expiresAt = new Date(payload.exp! * 1000)
    if (expiresAt.getTime() - now.getTime() > ATTESTATION_LIFETIME_MAX_SECONDS * 1000) {
      throw attestationError('The attestation claims a lifetime longer than 400 days', field)
    }
    return { kycLevel: level, kycVerifiedAt: now, kycExpiresAt: expiresAt, kycAttestationKeyId: key.id }
  }
  throw attestationError('The attestation signature does not verify', field)
}

export async function attachKyc(context: AccountsContext, orgId: string, accountId: string, attestation: string): Promise<AccountView> {
  const account = await requireAccount(context, orgId, accountId)
  const kyc = await verifyAttestation(context, orgId, attestation, [account.id, account.externalId], ATTESTATION_FIELD)
  const updated = await repo.updateAccount(context.db, orgId, accountId, kyc)
  return toAccountView(updated!)
}

function toAttestationKeyView(row: repo.AttestationKeyRow): AttestationKeyView {
  return { id: row.id, publicKey: row.publicKeyJwk, createdAt: row.createdAt.toISOString(), revokedAt: row.revokedAt?.toISOString() ?? null }
}

export async function registerAttestationKey(
  context: AccountsContext,
  orgId: string,
  publicKey: { kty: 'OKP'; crv: 'Ed25519'; x: string },
): Promise<AttestationKeyView> {
  try {
    await importJWK(publicKey, 'EdDSA')
  } catch {
    throw new ApiError('invalid_request', 'Not a usable Ed25519 public key', { field: 'publicKey.x' })
  }
  const row = await repo.insertAttestationKey(context.db, { id: newId('atk'), orgId, publicKeyJwk: publicKey, createdAt: context.clock.now(orgId) })
  return toAttestationKeyView(row)
}

export async function listAttestationKeys(context: AccountsContext, orgId: string): Promise<AttestationKeyView[]> {
  return (await repo.listAttestationKeys(context.db, orgId, false)).map(toAttestationKeyView)
}

export async function revokeAttestationKey(context: AccountsContext, orgId: string, keyId: string): Promise<AttestationKeyView> {
  const row = await repo.revokeAttestationKey(context.db, orgId, keyId, context.clock.now(orgId))
  if (!row) throw notFound('attestation key')
  return toAttestationKeyView(row)
}
