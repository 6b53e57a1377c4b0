import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'
import { DecimalAmount, RequestAmount } from '../balances/model.ts'

export const FeeModelSchema = t.Union([t.Literal('inclusive'), t.Literal('additive')], {
  description: 'inclusive (default): the fee comes out of amount; additive: the fee is charged on top',
})

export const CreateTransferBody = t.Object(
  {
    sourceAccountId: t.String({ maxLength: 64 }),
    destinationAccountId: t.String({ maxLength: 64 }),
    asset: t.String({ maxLength: 20 }),
    amount: RequestAmount,
    feeModel: t.Optional(FeeModelSchema),
    holdId: t.Optional(t.String({ maxLength: 64, description: 'Pay from this pending hold of the source; the remainder returns to available' })),
    description: t.Optional(t.String({ maxLength: 500 })),
  },
  { additionalProperties: false },
)

export const Transfer = t.Object(
  {
    id: t.String({ examples: ['tr_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    state: t.Literal('completed'),
    sourceAccountId: t.String(),
    destinationAccountId: t.String(),
    asset: t.String(),
    amount: DecimalAmount,
    feeModel: FeeModelSchema,
    fee: DecimalAmount,
    netAmount: t.String({ description: 'What the destination received' }),
    totalDebited: t.String({ description: 'What left the source' }),
    holdId: t.Union([t.String(), t.Null()]),
    description: t.Union([t.String(), t.Null()]),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'Transfer' },
)

export const ListTransfersQuery = t.Object(
  {
    accountId: t.Optional(t.String({ maxLength: 64, description: 'Transfers where this account is the source or the destination' })),
    after: t.Optional(t.String({ maxLength: 64, description: 'A transfer id: the page starts after it' })),
    limit: PageLimitQuery,
  },
  { additionalProperties: false },
)

export const TransferList = t.Object({ transfers: t.Array(Transfer), hasMore: t.Boolean() }, { title: 'TransferList' })

export type CreateTransferInput = Static<typeof CreateTransferBody>
export type TransferView = Static<typeof Transfer>
