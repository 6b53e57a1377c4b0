import { t, type Static } from 'elysia'
import { RequestAmount } from '../balances/model.ts'

export const CreateQuoteBody = t.Object(
  {
    kind: t.Literal('withdrawal', { description: 'withdrawal is live; instant_redeem comes with earning' }),
    accountId: t.String({ maxLength: 64 }),
    asset: t.String({ maxLength: 20 }),
    amount: RequestAmount,
  },
  { additionalProperties: false },
)

export const Quote = t.Object(
  {
    id: t.String({ examples: ['qt_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    kind: t.Literal('withdrawal'),
    accountId: t.String(),
    asset: t.String(),
    amount: t.String({ description: 'What arrives at the destination' }),
    fees: t.Object({
      network: t.String({ description: 'The chain\'s fee, passed through at cost' }),
      service: t.String({ description: 'Our fee' }),
    }),
    totalDebited: t.String({ description: 'All-in: amount + network fee + service fee; nothing else is charged' }),
    state: t.Union([t.Literal('open'), t.Literal('consumed'), t.Literal('expired')], {
      description: 'open until executed once (consumed) or past expiresAt (expired)',
    }),
    expiresAt: t.String({ format: 'date-time' }),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'Quote' },
)

export type CreateQuoteInput = Static<typeof CreateQuoteBody>
export type QuoteView = Static<typeof Quote>
