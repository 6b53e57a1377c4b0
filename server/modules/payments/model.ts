import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'
import { DecimalAmount, RequestAmount } from '../balances/model.ts'

/**
 * Reasons for a decline. A decline is HTTP 201 with one of these, never an error. The business
 * reasons are the codes of the contract's error vocabulary that a transfer or a hold answers for the
 * same reason; processing_timeout and processing_error have no such code.
 */
export const FAILURE_CODES = ['insufficient_available', 'account_frozen', 'limit_exceeded', 'unsupported_asset', 'min_amount', 'processing_timeout', 'processing_error'] as const
export type FailureCode = (typeof FAILURE_CODES)[number]

export const AuthorizePaymentBody = t.Object(
  {
    accountId: t.String({ maxLength: 64 }),
    asset: t.String({ maxLength: 20 }),
    amount: RequestAmount,
    merchant: t.Optional(
      t.Object(
        { name: t.String({ minLength: 1, maxLength: 200 }), mcc: t.Optional(t.String({ pattern: '^[0-9]{4}$', description: 'ISO 18245 merchant category code' })) },
        { additionalProperties: false },
      ),
    ),
    description: t.Optional(t.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
)

export const CapturePaymentBody = t.Object(
  { amount: t.Optional(t.String({ maxLength: 40, examples: ['12.50'], description: 'At most the authorized amount (default: all of it)' })) },
  { additionalProperties: false },
)

/** Every state a payment can be in: the payment's field, and the list's filter. */
const PaymentStateSchema = t.Union([t.Literal('authorized'), t.Literal('declined'), t.Literal('captured'), t.Literal('voided'), t.Literal('lapsed')], {
  description: 'authorized → captured | voided | lapsed (uncaptured 24 h after authorization; event payment.expired); declined is terminal from the start',
})
export type PaymentState = Static<typeof PaymentStateSchema>

export const Payment = t.Object(
  {
    id: t.String({ examples: ['pay_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    state: PaymentStateSchema,
    failureCode: t.Union(
      [
        t.Literal('insufficient_available'),
        t.Literal('account_frozen'),
        t.Literal('limit_exceeded'),
        t.Literal('unsupported_asset'),
        t.Literal('min_amount'),
        t.Literal('processing_timeout'),
        t.Literal('processing_error'),
        t.Null(),
      ],
      { description: 'Present when declined' },
    ),
    accountId: t.String(),
    asset: t.String(),
    amount: t.String({ description: 'The authorized (or declined) amount' }),
    capturedAmount: t.Union([DecimalAmount, t.Null()]),
    holdId: t.Union([t.String(), t.Null()], {
      description:
        "The hold reserving the amount while authorized. `GET /v1/holds/{holdId}` shows it in every state (pending, then captured, released, or expired when the payment lapses); only the payment's own capture and void move it.",
    }),
    merchant: t.Union([t.Object({ name: t.String(), mcc: t.Union([t.String(), t.Null()]) }), t.Null()]),
    description: t.Union([t.String(), t.Null()]),
    expiresAt: t.Union([t.String({ format: 'date-time' }), t.Null()], { description: 'When an uncaptured authorization lapses, on the organization\'s clock' }),
    createdAt: t.String({ format: 'date-time' }),
    closedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  },
  { title: 'Payment' },
)

export const ListPaymentsQuery = t.Object(
  {
    accountId: t.Optional(t.String({ maxLength: 64 })),
    state: t.Optional(PaymentStateSchema),
    after: t.Optional(t.String({ maxLength: 64, description: 'A payment id: the page starts after it' })),
    limit: PageLimitQuery,
  },
  { additionalProperties: false },
)

export const PaymentList = t.Object({ payments: t.Array(Payment), hasMore: t.Boolean() }, { title: 'PaymentList' })

export type AuthorizePaymentInput = Static<typeof AuthorizePaymentBody>
export type CapturePaymentInput = Static<typeof CapturePaymentBody>
export type PaymentView = Static<typeof Payment>
