import { t, type Static } from 'elysia'
import { DecimalAmount, RequestAmount } from '../balances/model.ts'
import { FeeModelSchema } from '../transfers/model.ts'

/** A hold lives at least a minute (shorter is a mistake) and at most a week (longer is a loan). */
export const HOLD_LIFETIME_MIN_SECONDS = 60
export const HOLD_LIFETIME_MAX_SECONDS = 7 * 24 * 3600

export const CreateHoldBody = t.Object(
  {
    accountId: t.String({ maxLength: 64 }),
    asset: t.String({ maxLength: 20 }),
    amount: RequestAmount,
    expiresInSeconds: t.Integer({
      minimum: HOLD_LIFETIME_MIN_SECONDS,
      maximum: HOLD_LIFETIME_MAX_SECONDS,
      description: 'Lifetime on the organization\'s clock; at expiry the hold is released automatically',
      error: `expiresInSeconds must be a whole number from ${HOLD_LIFETIME_MIN_SECONDS} to ${HOLD_LIFETIME_MAX_SECONDS}`,
    }),
  },
  { additionalProperties: false },
)

export const CaptureHoldBody = t.Object(
  {
    destinationAccountId: t.String({ maxLength: 64 }),
    amount: t.Optional(RequestAmount),
    feeModel: t.Optional(FeeModelSchema),
    description: t.Optional(t.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
)

export const Hold = t.Object(
  {
    id: t.String({ examples: ['hold_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    accountId: t.String(),
    asset: t.String(),
    amount: DecimalAmount,
    state: t.Union([t.Literal('pending'), t.Literal('captured'), t.Literal('released'), t.Literal('expired')]),
    expiresAt: t.String({ format: 'date-time' }),
    capturedAmount: t.Union([DecimalAmount, t.Null()], { description: 'What the capture debited from the hold (amount plus any additive fee)' }),
    transferId: t.Union([t.String(), t.Null()]),
    createdAt: t.String({ format: 'date-time' }),
    closedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  },
  { title: 'Hold' },
)

export type CreateHoldInput = Static<typeof CreateHoldBody>
export type CaptureHoldInput = Static<typeof CaptureHoldBody>
export type HoldView = Static<typeof Hold>
