/** The SBT listener's response schemas (TypeBox, i.e. JSON Schema) and the OpenAPI 3.1 document built from them. */
import { Type as t, type TSchema } from '@sinclair/typebox'
import { SBT_ERRORS } from './envelope.ts'
import { PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX, PAGE_SIZE_MIN } from './reads.ts'

const Social = t.Object({ level: t.Integer({ minimum: 1, maximum: 10 }), sbtId: t.Integer(), title: t.String(), taskName: t.String(), points: t.Integer() })
const Referral = t.Object({ ...Social.properties, invitesRequired: t.Integer(), claimed: t.Boolean() })
const Lockdrop = t.Object({ ...Social.properties, usdRequired: t.Number({ description: 'Minimum USD value in USDC required for verification' }) })
const UserRecord = t.Object({
  suiAddress: t.String({ description: 'Normalized: 0x and 64 lower-case hex digits' }),
  claimedSocialSbts: t.Array(Social),
  claimedReferralSbts: t.Array(Referral),
  claimedLockdropSbts: t.Array(Lockdrop),
  totalRawPoints: t.Integer({ description: 'Sum of the points of every claimed SBT (claimType 4 only)' }),
  sbtCount: t.Integer({ description: 'Number of claimed SBTs; equals the three lists together' }),
  referralLink: t.String({ description: '<SBT_REFERRAL_BASE_URL>/native/incentive/<campaign id>?code=<invite code>; the default campaign, else the first by id; empty when no campaign exists' }),
  invitees: t.Array(t.Object({ suiAddress: t.String(), inviteDate: t.String({ format: 'date-time', description: 'ISO 8601 UTC' }) })),
  inviteeCount: t.Integer(),
})
const PagedRecord = t.Object({
  users: t.Array(t.Object({ suiAddress: t.String(), sbtCount: t.Integer(), totalRawPoints: t.Integer(), claimedSocialSbts: t.Array(Social), claimedReferralSbts: t.Array(Referral) })),
  pagination: t.Object({ currentPage: t.Integer(), pageSize: t.Integer(), totalUsers: t.Integer(), totalPages: t.Integer() }),
})
const WalletProof = {
  address: t.String({ description: 'The Sui address that signed the challenge' }),
  nonce: t.String({ description: 'The nonce of a challenge from POST /auth/challenge (single use, 5 minutes)' }),
  signature: t.String({ description: 'Sui serialized signature (base64 of flag 0x00, Ed25519 signature, public key) over the challenge message as a personal message' }),
}
const SponsoredTransaction = t.Object({
  rail: t.Union([t.Literal('sui'), t.Literal('evm')]),
  txBytes: t.String(),
  digest: t.String(),
  sender: t.String(),
  sponsor: t.String(),
  sponsorSignature: t.String(),
  gasBudget: t.String(),
  expiresAt: t.String({ format: 'date-time' }),
})

function envelope(data: TSchema): TSchema {
  return t.Object({ code: t.Literal(0), message: t.String(), data })
}

const ErrorEnvelope = t.Object({ code: t.Integer({ description: 'Non-zero: see the table in the API description' }), message: t.String(), data: t.Null() })

function operation(summary: string, description: string, data: TSchema, extra: Record<string, unknown> = {}) {
  return {
    summary,
    description,
    ...extra,
    responses: {
      '200': { description: 'Success (code 0)', content: { 'application/json': { schema: envelope(data) } } },
      default: { description: 'An error envelope', content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } } },
    },
  }
}

function jsonBody(properties: Record<string, TSchema>) {
  return { requestBody: { required: true, content: { 'application/json': { schema: t.Object(properties, { additionalProperties: true }) } } } }
}

const errorTable = Object.values(SBT_ERRORS)
  .map((entry) => `| ${entry.code} | ${entry.status} | ${entry.meaning} |`)
  .join('\n')

/** The SBT listener's OpenAPI 3.1 document. */
export function sbtOpenApi(environment: string): Record<string, unknown> {
  const proofBody = (extra: Record<string, TSchema> = {}) => jsonBody({ ...WalletProof, ...extra })
  return JSON.parse(
    JSON.stringify({
      openapi: '3.1.0',
      info: {
        title: `Kassa SBT data API (${environment})`,
        version: '1',
        description: `Every answer is the envelope {code, message, data}; code 0 on success. Authenticate with \`Authorization: <token>\` (the token itself, no scheme word); tokens are issued by operators per environment, and a staging token is refused by production and the reverse.\n\n| code | HTTP | meaning |\n|---|---|---|\n${errorTable}`,
      },
      security: [{ token: [] }],
      components: { securitySchemes: { token: { type: 'apiKey', in: 'header', name: 'Authorization' } }, schemas: { ErrorEnvelope } },
      paths: {
        '/gonative/user': {
          get: operation('A user by Sui address', 'Only claimType 4 counts as claimed. A malformed address is 40002, an unknown one 40401.', UserRecord, {
            parameters: [{ name: 'address', in: 'query', required: true, schema: { type: 'string' }, description: 'Sui address: 64 hex digits with or without 0x, any case' }],
          }),
        },
        '/gonative/all-users': {
          get: operation('All users, a page at a time', `In the order users joined (stable). page from 1 (default 1); pageSize ${PAGE_SIZE_MIN} to ${PAGE_SIZE_MAX} (default ${PAGE_SIZE_DEFAULT}); out of range is 40003, never clamped. A page past the end is empty.`, PagedRecord, {
            parameters: [
              { name: 'page', in: 'query', required: false, schema: { type: 'integer', minimum: 1, default: 1 } },
              { name: 'pageSize', in: 'query', required: false, schema: { type: 'integer', minimum: PAGE_SIZE_MIN, maximum: PAGE_SIZE_MAX, default: PAGE_SIZE_DEFAULT } },
            ],
          }),
        },
        '/auth/challenge': {
          post: operation('Ask for a sign-in challenge', 'The wallet signs `message` as a Sui personal message; the nonce and signature then go with one credential or claim request. Single use, valid 5 minutes. An inviteCode given here names the inviter of a user signing in for the first time.', t.Object({ nonce: t.String(), message: t.String(), expiresAt: t.String({ format: 'date-time' }) }), jsonBody({ address: t.String(), inviteCode: t.Optional(t.String()) })),
        },
        '/campaignNew/credential/{id}/verify': {
          post: operation('Verify one credential now', 'Dispatches on labelType through the registry (docs/sbt.md). status 1: passed, and a result row with status 1 was written; status 0: not passed, reason says why, nothing written. An undefined labelType, or one needing a platform API, is 42202.', t.Object({ credentialId: t.String(), labelType: t.Integer(), status: t.Union([t.Literal(0), t.Literal(1)]), reason: t.Union([t.String(), t.Null()]) }), {
            parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
            ...proofBody(),
          }),
        },
        '/campaignNew/credential/{id}/click': {
          post: operation('Record a click or participation', 'What click-to-verify credentials (8, 12, 72) check.', t.Object({ credentialId: t.String(), recorded: t.Literal(true) }), {
            parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
            ...proofBody(),
          }),
        },
        '/sui/sbt/claim': {
          post: operation('Claim an SBT on Sui', 'Allowed when every credential of the reward\'s group has a stored result with status 1 (no live re-verification). The claim record moves to 3 (minting); the answer is the fee-sponsored transaction to sign. A second claim is 40901 (claimed) or 40902 (minting).', t.Object({ sbtId: t.Integer(), claimType: t.Literal(3), transaction: SponsoredTransaction }), proofBody({ sbtId: t.Integer() })),
        },
        '/evm-sbt/sbt/claim': {
          post: operation('Claim an SBT on the EVM rail', 'The same gating; the sender is the user\'s bound EVM wallet (42203 when none).', t.Object({ sbtId: t.Integer(), claimType: t.Literal(3), transaction: SponsoredTransaction }), proofBody({ sbtId: t.Integer() })),
        },
        '/sui/sbt/claim/check': {
          post: operation('Confirm a mint', 'Reads the chain live: the SBT held and the transaction executed moves the record 3 → 4; failed or expired unexecuted 3 → 5 (the user may claim again); otherwise it stays 3 (mint: pending).', t.Object({ sbtId: t.Integer(), claimType: t.Integer(), txDigest: t.String(), mint: t.Union([t.Literal('executed'), t.Literal('failed'), t.Literal('pending')]) }), proofBody({ sbtId: t.Integer() })),
        },
      },
    }),
  )
}
