import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'

export const ExternalId = t.String({
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9._:@-]+$',
  description: 'Your own identifier for the end user; minting the same externalId again returns the same account',
  error: 'externalId must be 1 to 128 characters of letters, digits and . _ : @ -',
})

export const AccountType = t.Union([t.Literal('individual'), t.Literal('business')])

/**
 * TypeBox turns a Record's key schema into `patternProperties`, where a `maxLength` on the key is
 * silently dropped; the key limit therefore lives in the pattern, and `additionalProperties: false`
 * refuses the keys the pattern does not match.
 */
export const Metadata = t.Record(t.String({ pattern: '^[\\s\\S]{1,40}$' }), t.String({ maxLength: 500 }), {
  maxProperties: 20,
  additionalProperties: false,
  description: 'Up to 20 string pairs of your own; keys of 1 to 40 characters, values of at most 500',
})

export const Kyc = t.Object({
  level: t.String({ description: 'The level the attestation asserts' }),
  verifiedAt: t.String({ format: 'date-time' }),
  expiresAt: t.String({ format: 'date-time' }),
  attestationKeyId: t.String(),
})

export const Account = t.Object(
  {
    id: t.String({ examples: ['acct_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    externalId: t.String(),
    type: AccountType,
    status: t.Union([t.Literal('active'), t.Literal('frozen')]),
    metadata: t.Record(t.String(), t.String()),
    kyc: t.Union([Kyc, t.Null()], { description: 'The verified attestation, or null before one is accepted' }),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'Account' },
)

export const CreateAccountBody = t.Object(
  {
    externalId: ExternalId,
    type: t.Optional(AccountType),
    metadata: t.Optional(Metadata),
    kycAttestation: t.Optional(t.String({ maxLength: 8192, description: 'A compact JWS attestation; see POST /v1/accounts/{id}/kyc' })),
  },
  { additionalProperties: false },
)

export const ListAccountsQuery = t.Object(
  {
    externalId: t.Optional(ExternalId),
    after: t.Optional(t.String({ description: 'An account id: the page starts after it' })),
    // The range is checked in the service, not here: Elysia coerces a query integer in a
    // transform whose range failure loses the parameter's name, and the caller must be told
    // which field is wrong.
    limit: PageLimitQuery,
  },
  { additionalProperties: false },
)

export const AccountList = t.Object({ accounts: t.Array(Account), hasMore: t.Boolean() }, { title: 'AccountList' })

export const KycBody = t.Object(
  {
    attestation: t.String({
      minLength: 1,
      maxLength: 8192,
      description:
        'Compact JWS (EdDSA) signed by one of your attestation keys. Claims: sub (the account id or externalId), level, exp; kid names the key.',
    }),
  },
  { additionalProperties: false },
)

export const Ed25519Jwk = t.Object(
  {
    kty: t.Literal('OKP'),
    crv: t.Literal('Ed25519'),
    x: t.String({ pattern: '^[A-Za-z0-9_-]{43}$', description: 'The 32-byte public key, base64url' }),
  },
  { additionalProperties: false },
)

export const CreateAttestationKeyBody = t.Object({ publicKey: Ed25519Jwk }, { additionalProperties: false })

export const AttestationKey = t.Object(
  {
    id: t.String({ examples: ['atk_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    publicKey: Ed25519Jwk,
    createdAt: t.String({ format: 'date-time' }),
    revokedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  },
  { title: 'AttestationKey' },
)

export type AccountView = Static<typeof Account>
export type CreateAccountInput = Static<typeof CreateAccountBody>
export type AttestationKeyView = Static<typeof AttestationKey>
