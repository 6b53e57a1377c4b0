import { t, type Static } from 'elysia'

export const ONBOARDING_ITEMS = ['business_verified', 'agreement_signed', 'security_review', 'webhooks_tested'] as const
export type OnboardingItem = (typeof ONBOARDING_ITEMS)[number]

export const KeyType = t.Union([t.Literal('secret'), t.Literal('publishable'), t.Literal('test')])
export const KeyEnvironment = t.Union([t.Literal('sandbox'), t.Literal('production')])

export const IssuedKey = t.Object(
  {
    id: t.String({ examples: ['key_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    type: KeyType,
    environment: KeyEnvironment,
    key: t.String({ description: 'The key itself. Shown only here, once; only its hash is stored.' }),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'IssuedKey' },
)

export const KeyStatus = t.Union([t.Literal('active'), t.Literal('expiring'), t.Literal('expired'), t.Literal('revoked')])

export const KeySummary = t.Object(
  {
    id: t.String(),
    type: KeyType,
    environment: KeyEnvironment,
    lastFour: t.String(),
    status: KeyStatus,
    createdAt: t.String({ format: 'date-time' }),
    expiresAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    revokedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    replacedByKeyId: t.Union([t.String(), t.Null()]),
  },
  { title: 'KeySummary' },
)

export const Onboarding = t.Object({
  checklist: t.Record(t.String(), t.Boolean()),
  signedOffAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  signedOffBy: t.Union([t.String(), t.Null()]),
})

export const Organization = t.Object(
  {
    id: t.String(),
    name: t.String(),
    rateLimitPerMinute: t.Integer({ description: 'Per-key limit for secret and test keys in each 60 s window' }),
    onboarding: Onboarding,
    keys: t.Array(KeySummary),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'Organization' },
)

export const CreateOrganizationBody = t.Object(
  { name: t.String({ minLength: 1, maxLength: 200 }) },
  { additionalProperties: false },
)

export const CreatedOrganization = t.Object(
  { id: t.String(), name: t.String(), keys: t.Array(IssuedKey) },
  { title: 'CreatedOrganization' },
)

export const IssueKeyBody = t.Object({ type: KeyType, environment: KeyEnvironment }, { additionalProperties: false })

export const RotateKeyBody = t.Object(
  {
    overlapSeconds: t.Optional(
      t.Integer({
        minimum: 0,
        maximum: 7 * 24 * 3600,
        description: 'How long the old key keeps working after rotation; 24 h when left out',
      }),
    ),
  },
  { additionalProperties: false },
)

export const RotatedKey = t.Object({
  key: IssuedKey,
  previous: KeySummary,
})

export const ChecklistBody = t.Object(
  {
    items: t.Partial(
      t.Object(Object.fromEntries(ONBOARDING_ITEMS.map((item) => [item, t.Boolean()])), { additionalProperties: false }),
    ),
  },
  { additionalProperties: false },
)

export const SignOffBody = t.Object(
  { signedOffBy: t.String({ minLength: 1, maxLength: 200, description: 'Who signed off, for the audit trail' }) },
  { additionalProperties: false },
)

export const LimitsBody = t.Object(
  {
    rateLimitPerMinute: t.Union([t.Integer({ minimum: 1, maximum: 10_000_000 }), t.Null()], {
      description: 'Raised per-key limit for secret and test keys; null restores the contract default (1000)',
    }),
  },
  { additionalProperties: false },
)

export const WithdrawalApprovalBody = t.Object(
  {
    asset: t.String({ maxLength: 20, examples: ['USDC'] }),
    threshold: t.Union([t.String({ maxLength: 40, examples: ['10000'] }), t.Null()], {
      description: 'Withdrawals whose amount is above this wait for a second key; "0" makes every withdrawal wait; null restores the default (10000)',
    }),
  },
  { additionalProperties: false },
)

export const WithdrawalApproval = t.Object(
  {
    orgId: t.String(),
    thresholds: t.Array(
      t.Object({
        asset: t.String(),
        threshold: t.String({ description: 'Withdrawals with an amount above this wait in pending_approval' }),
        isDefault: t.Boolean({ description: 'True while the organization has no threshold of its own for this asset' }),
      }),
    ),
  },
  { title: 'WithdrawalApproval' },
)

export type WithdrawalApprovalView = Static<typeof WithdrawalApproval>
export type OrganizationView = Static<typeof Organization>
export type KeySummaryView = Static<typeof KeySummary>
export type IssuedKeyView = Static<typeof IssuedKey>
