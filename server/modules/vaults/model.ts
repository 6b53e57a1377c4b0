import { t, type Static } from 'elysia'
import { DecimalAmount, RequestAmount } from '../balances/model.ts'

const Bps = (description: string) => t.Integer({ minimum: 0, maximum: 10_000, description })
const CycleSeconds = t.Union([t.Integer({ minimum: 60, maximum: 366 * 86_400 }), t.Null()], {
  description: 'Seconds between automatic closes and settlements of the cycle; null when operators close and settle it',
})

export const VaultTerms = t.Object({
  minSubscription: DecimalAmount,
  minRedemption: t.String({ description: 'Minimum shares per redemption' }),
  depositCycleSeconds: CycleSeconds,
  redeemCycleSeconds: CycleSeconds,
  instantRedemptionFeeBps: t.Integer({ description: 'Fee of an instant redemption, itemized on its instant_redeem quote' }),
  subscriptionFeeBps: t.Integer({ description: 'Withheld from each subscription (rounded up); 0 for none' }),
  platformFeeBps: t.Integer({ description: 'Share of the yield kept by the platform; the share price is net of it' }),
  payoutMode: t.Union([t.Literal('direct'), t.Literal('claimable')], {
    description: 'direct: redemption proceeds are paid to the account at settlement; claimable: they wait for POST /v1/claims',
  }),
  priceMaxAgeSeconds: t.Integer({ description: 'A price older than this answers stale_price to subscriptions and instant redemptions' }),
})

export const Vault = t.Object(
  {
    vaultId: t.String({ examples: ['usdc-core'] }),
    name: t.String(),
    asset: t.String({ examples: ['USDC'] }),
    state: t.Union([t.Literal('active'), t.Literal('paused')]),
    terms: VaultTerms,
    instantBuffer: t.String({ description: 'What instant redemptions can still pay out, platform-wide' }),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'Vault' },
)

export const VaultList = t.Object({ vaults: t.Array(Vault) }, { title: 'VaultList' })

export const VaultPrice = t.Object(
  {
    vaultId: t.String(),
    asset: t.String(),
    sharePrice: t.String({ description: 'Value of one share in the asset, up to 18 decimals' }),
    normalizedPrice: t.String({ description: 'sharePrice divided by the vault\'s initial price (1.000000 at launch)' }),
    apy: t.Union([t.String(), t.Null()], {
      description:
        'Annual yield as a fraction ("0.052000" is 5.2 %), net of the platform fee: the share price change over the trailing 7 days, compounded over a year ((p_now / p_7d_ago)^(365/7) - 1). null until the vault has 7 days of price history.',
    }),
    apyWindowDays: t.Integer(),
    asOf: t.String({ format: 'date-time', description: 'When the venue last reported this price' }),
    stale: t.Boolean({ description: 'Older than the vault\'s priceMaxAgeSeconds: subscriptions and instant redemptions answer stale_price' }),
  },
  { title: 'VaultPrice' },
)

export const VaultIdParams = t.Object({ id: t.String({ maxLength: 64 }) })

export const CreateVaultBody = t.Object(
  {
    vaultId: t.String({ pattern: '^[a-z0-9][a-z0-9_-]{1,47}$', description: 'Lower-case letters, digits, - and _' }),
    name: t.String({ minLength: 1, maxLength: 120 }),
    asset: t.String({ maxLength: 20 }),
    minSubscription: RequestAmount,
    minRedemption: RequestAmount,
    depositCycleSeconds: t.Optional(CycleSeconds),
    redeemCycleSeconds: t.Optional(CycleSeconds),
    instantRedemptionFeeBps: t.Optional(Bps('Default 0')),
    subscriptionFeeBps: t.Optional(Bps('Default 0')),
    platformFeeBps: t.Optional(Bps('Default 0')),
    payoutMode: t.Optional(t.Union([t.Literal('direct'), t.Literal('claimable')])),
    priceMaxAgeSeconds: t.Optional(t.Integer({ minimum: 60, maximum: 30 * 86_400, description: 'Default 2 days' })),
    instantBuffer: t.Optional(RequestAmount),
    initialPrice: t.Optional(t.String({ maxLength: 40, description: 'Default 1' })),
    dailyRate: t.Optional(t.String({ maxLength: 20, description: 'Sandbox venue: daily NAV growth as a fraction ("0.00015"); default 0' })),
  },
  { additionalProperties: false },
)

export const UpdateVaultBody = t.Object(
  {
    name: t.Optional(t.String({ minLength: 1, maxLength: 120 })),
    minSubscription: t.Optional(RequestAmount),
    minRedemption: t.Optional(RequestAmount),
    depositCycleSeconds: t.Optional(CycleSeconds),
    redeemCycleSeconds: t.Optional(CycleSeconds),
    instantRedemptionFeeBps: t.Optional(Bps('')),
    subscriptionFeeBps: t.Optional(Bps('')),
    platformFeeBps: t.Optional(Bps('')),
    payoutMode: t.Optional(t.Union([t.Literal('direct'), t.Literal('claimable')])),
    priceMaxAgeSeconds: t.Optional(t.Integer({ minimum: 60, maximum: 30 * 86_400 })),
    instantBuffer: t.Optional(t.String({ maxLength: 40, description: 'Sets the buffer (a decimal string, 0 allowed)' })),
  },
  { additionalProperties: false },
)

export const SetNavBody = t.Object(
  {
    price: t.String({ maxLength: 40, description: 'New share price (decimal, up to 18 decimals)' }),
    dailyRate: t.Optional(t.String({ maxLength: 20, description: 'New daily growth as a fraction' })),
  },
  { additionalProperties: false },
)

export const AdvanceBody = t.Object({ seconds: t.Integer({ minimum: 1, maximum: 366 * 86_400 }) }, { additionalProperties: false })

export type VaultView = Static<typeof Vault>
export type VaultPriceView = Static<typeof VaultPrice>
export type CreateVaultInput = Static<typeof CreateVaultBody>
export type UpdateVaultInput = Static<typeof UpdateVaultBody>

/** The body of an operator action on a vault or a cycle: who acts, for the audit trail. */
export const OperatorActBody = t.Optional(
  t.Object(
    {
      operator: t.Optional(
        t.String({ minLength: 1, maxLength: 100, pattern: '^[^\\u0000-\\u001f\\u007f]+$', description: 'Who acts, recorded in the operator audit trail; "operator" when left out' }),
      ),
    },
    { additionalProperties: false },
  ),
)
