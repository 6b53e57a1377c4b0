import { t, type Static } from 'elysia'
import { Withdrawal } from '../withdrawals/model.ts'

export const OperatorName = t.String({
  minLength: 1,
  maxLength: 100,
  pattern: '^[^\\u0000-\\u001f\\u007f]+$',
  description: 'The name of the operator taking the action, recorded in the audit trail',
})

export const ApproveBody = t.Object({ operator: OperatorName }, { additionalProperties: false })
export const RejectBody = t.Object(
  { operator: OperatorName, reason: t.String({ minLength: 1, maxLength: 500, description: 'Why, shown to the organization in the withdrawal and its event' }) },
  { additionalProperties: false },
)
export type RejectInput = Static<typeof RejectBody>

export const Screening = t.Object(
  {
    outcome: t.Union([t.Literal('pass'), t.Literal('reject'), t.Literal('unavailable')], {
      description: 'The destination screened again now: pass, reject (reason says why) or unavailable (the screening could not decide)',
    }),
    reason: t.Union([t.String(), t.Null()]),
  },
  { title: 'ScreeningResult' },
)

export const QueueItem = t.Object(
  {
    id: t.String(),
    orgId: t.String(),
    orgName: t.String(),
    accountId: t.String(),
    amount: t.String(),
    asset: t.String(),
    network: t.String(),
    destination: t.String(),
    screening: Screening,
    createdAt: t.String({ format: 'date-time' }),
    ageSeconds: t.Integer({ description: "Seconds since creation on the organization's clock" }),
  },
  { title: 'ApprovalQueueItem' },
)
export type QueueItemView = Static<typeof QueueItem>

export const ApprovalQueue = t.Object({ withdrawals: t.Array(QueueItem), hasMore: t.Boolean() }, { title: 'ApprovalQueue' })

export const QueueQuery = t.Object({ limit: t.Optional(t.Integer({ description: 'At most this many, 1 to 200 (default 100)' })) })

export const OperatorAction = t.Object(
  {
    id: t.String({ examples: ['opa_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    operator: t.String(),
    tokenFingerprint: t.String({ description: 'First 16 hex digits of the SHA-256 of the operator token used' }),
    action: t.String({ examples: ['withdrawal.approve', 'withdrawal.reject'] }),
    targetId: t.String(),
    orgId: t.Union([t.String(), t.Null()]),
    outcome: t.Union([t.Literal('succeeded'), t.Literal('refused')]),
    errorCode: t.Union([t.String(), t.Null()]),
    detail: t.Record(t.String(), t.Unknown()),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'OperatorAction' },
)
export type OperatorActionView = Static<typeof OperatorAction>

export const OperatorActionList = t.Object({ actions: t.Array(OperatorAction) }, { title: 'OperatorActionList' })
export const OperatorActionsQuery = t.Object({
  targetId: t.Optional(t.String({ maxLength: 64 })),
  limit: t.Optional(t.Integer({ description: '1 to 200 (default 50)' })),
})

export const QuoteView = t.Object(
  {
    id: t.String(),
    state: t.String(),
    amount: t.String(),
    networkFee: t.String(),
    serviceFee: t.String(),
    totalDebited: t.String(),
    createdAt: t.String({ format: 'date-time' }),
    expiresAt: t.String({ format: 'date-time' }),
  },
  { title: 'OperatorQuote' },
)

export const WithdrawalDetail = t.Object(
  {
    orgId: t.String(),
    orgName: t.String(),
    withdrawal: Withdrawal,
    quote: t.Union([QuoteView, t.Null()]),
    screening: Screening,
    actions: t.Array(OperatorAction, { description: 'The operator actions on this withdrawal, newest first' }),
  },
  { title: 'OperatorWithdrawalDetail' },
)

export const StreamQuery = t.Object({
  types: t.Optional(
    t.String({ maxLength: 2000, description: 'Comma-separated; each an exact event type or a namespace with .* (treasury.*), at most 20' }),
  ),
  orgId: t.Optional(t.String({ maxLength: 64, description: "Only this organization's events" })),
  backlog: t.Optional(t.Integer({ description: 'Without a cursor, first send the last this many matching events (0 to 200, default 0)' })),
  after: t.Optional(t.String({ maxLength: 64, description: 'Resume after this event id (as the Last-Event-ID header, which wins when both are sent)' })),
})
export type StreamInput = Static<typeof StreamQuery>
