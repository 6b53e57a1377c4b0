import { t, type Static } from 'elysia'
import { RequestAmount } from '../balances/model.ts'

export const CreateWithdrawalQuoteBody = t.Object(
  {
    kind: t.Literal('withdrawal'),
    accountId: t.String({ maxLength: 64 }),
    asset: t.String({ maxLength: 20 }),
    amount: RequestAmount,
  },
  { additionalProperties: false, title: 'WithdrawalQuoteRequest' },
)

export const CreateInstantRedeemQuoteBody = t.Object(
  {
    kind: t.Literal('instant_redeem'),
    accountId: t.String({ maxLength: 64 }),
    vaultId: t.String({ maxLength: 64 }),
    shares: t.String({ maxLength: 40, description: 'Shares to redeem at once from the vault\'s buffer' }),
  },
  { additionalProperties: false, title: 'InstantRedeemQuoteRequest' },
)

export const CreateQuoteBody = t.Union([CreateWithdrawalQuoteBody, CreateInstantRedeemQuoteBody])

export const Quote = t.Object(
  {
    id: t.String({ examples: ['qt_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    kind: t.Union([t.Literal('withdrawal'), t.Literal('instant_redeem')]),
    accountId: t.String(),
    asset: t.String(),
    amount: t.String({ description: 'What arrives: at the destination (withdrawal), in available (instant_redeem, the proceeds net of the fee)' }),
    fees: t.Object({
      network: t.String({ description: 'The chain\'s fee, passed through at cost (0 for instant_redeem)' }),
      service: t.String({ description: 'Our fee (instant_redeem: the vault\'s instant-redemption fee on the shares\' value, rounded up)' }),
    }),
    totalDebited: t.String({ description: 'withdrawal: all-in, amount + network fee + service fee; instant_redeem: the shares\' value at the quoted price, rounded down' }),
    vaultId: t.Optional(t.String({ description: 'instant_redeem only' })),
    shares: t.Optional(t.String({ description: 'instant_redeem only: the shares redeemed' })),
    state: t.Union([t.Literal('open'), t.Literal('consumed'), t.Literal('expired')], {
      description: 'open until executed once (consumed) or past expiresAt (expired)',
    }),
    expiresAt: t.String({ format: 'date-time' }),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'Quote' },
)

export type CreateQuoteInput = Static<typeof CreateQuoteBody>
export type CreateInstantRedeemQuoteInput = Static<typeof CreateInstantRedeemQuoteBody>
export type QuoteView = Static<typeof Quote>
