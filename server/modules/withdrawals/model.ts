import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'
import { DecimalAmount } from '../balances/model.ts'

export const WITHDRAWAL_STATES = ['pending_approval', 'approved', 'submitted', 'confirmed', 'failed', 'rejected'] as const
export type WithdrawalState = (typeof WITHDRAWAL_STATES)[number]

export const WithdrawalStateSchema = t.Union(
  [t.Literal('pending_approval'), t.Literal('approved'), t.Literal('submitted'), t.Literal('confirmed'), t.Literal('failed'), t.Literal('rejected')],
  {
    description:
      'pending_approval (above the approval threshold, waits for a second key) → approved (unsigned transaction available) → submitted (broadcast) → confirmed (chainEvidence; event treasury.withdrawal.completed) | failed (funds back in available); pending_approval → rejected (funds back in available)',
  },
)

export const CreateWithdrawalBody = t.Object(
  {
    accountId: t.String({ maxLength: 64 }),
    allowlistEntryId: t.String({ maxLength: 64, description: 'An active allowlist entry of the same account' }),
    quoteId: t.String({ maxLength: 64, description: 'An open withdrawal quote of the same account, not expired; executed once by this withdrawal' }),
  },
  { additionalProperties: false },
)

const Actor = t.Object(
  {
    type: t.Union([t.Literal('key'), t.Literal('operator'), t.Literal('policy')], {
      description: 'key: a secret key of the organization (id = key id); operator: through /ops/v1 (id = the operator named); policy: at or below the approval threshold, approved at creation',
    }),
    id: t.Union([t.String(), t.Null()]),
  },
  { title: 'WithdrawalActor' },
)

export const UnsignedTransactionSchema = t.Object(
  {
    network: t.String(),
    encoding: t.Literal('json'),
    payload: t.String({ description: 'The transaction to sign, deterministic from the withdrawal' }),
    digest: t.String(),
  },
  { title: 'UnsignedTransaction' },
)

export const ChainEvidenceSchema = t.Object(
  {
    txHash: t.String(),
    network: t.String(),
    block: t.String({ description: 'Tron block number or Sui checkpoint sequence number' }),
    confirmations: t.Integer(),
    confirmedAt: t.String({ format: 'date-time' }),
  },
  { title: 'ChainEvidence' },
)

export const Withdrawal = t.Object(
  {
    id: t.String({ examples: ['wd_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    accountId: t.String(),
    allowlistEntryId: t.String(),
    quoteId: t.String(),
    network: t.String(),
    asset: t.String(),
    address: t.String(),
    amount: DecimalAmount,
    fees: t.Object({ network: DecimalAmount, service: DecimalAmount }),
    totalDebited: DecimalAmount,
    state: WithdrawalStateSchema,
    approval: t.Object({
      required: t.Boolean({ description: 'True when the amount was above the organization\'s approval threshold' }),
      approvedBy: t.Union([Actor, t.Null()]),
      approvedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    }),
    rejectedBy: t.Union([Actor, t.Null()]),
    unsignedTransaction: t.Union([UnsignedTransactionSchema, t.Null()], { description: 'Present once approved' }),
    txHash: t.Union([t.String(), t.Null()]),
    chainEvidence: t.Union([ChainEvidenceSchema, t.Null()], { description: 'Present when confirmed' }),
    failureReason: t.Union([t.String(), t.Null()]),
    createdAt: t.String({ format: 'date-time' }),
    submittedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    closedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  },
  { title: 'Withdrawal' },
)

export const ListWithdrawalsQuery = t.Object(
  {
    accountId: t.Optional(t.String({ maxLength: 64 })),
    state: t.Optional(WithdrawalStateSchema),
    after: t.Optional(t.String({ maxLength: 64, description: 'A withdrawal id: the page starts after it' })),
    limit: PageLimitQuery,
  },
  { additionalProperties: false },
)

export const WithdrawalList = t.Object({ withdrawals: t.Array(Withdrawal), hasMore: t.Boolean() }, { title: 'WithdrawalList' })

export const RejectBody = t.Object({ reason: t.Optional(t.String({ maxLength: 500 })) }, { additionalProperties: false })

export const OperatorActionBody = t.Object(
  {
    operator: t.Optional(t.String({ minLength: 1, maxLength: 200, description: 'Who acts, for the audit trail; "operator" when left out' })),
    reason: t.Optional(t.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
)

export type CreateWithdrawalInput = Static<typeof CreateWithdrawalBody>
export type WithdrawalView = Static<typeof Withdrawal>
export type ListWithdrawalsInput = Static<typeof ListWithdrawalsQuery>
