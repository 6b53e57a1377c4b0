import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'
import { DecimalAmount, RequestAmount } from '../balances/model.ts'

const NetworkSchema = t.Union([t.Literal('sui'), t.Literal('tron')], { description: 'sui (USDC) or tron (USDT)' })
const DateTime = t.String({ format: 'date-time' })
const Nullable = <T extends Parameters<typeof t.Union>[0][number]>(schema: T) => t.Union([schema, t.Null()])

export const CreateDepositAddressBody = t.Object(
  {
    asset: t.String({ maxLength: 20, examples: ['USDC'] }),
    network: t.Optional(t.String({ maxLength: 20, description: "The asset's network; may be left out (each asset lives on one network)" })),
  },
  { additionalProperties: false },
)

export const DepositAddress = t.Object(
  {
    id: t.String({ examples: ['addr_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    accountId: t.String(),
    asset: t.String(),
    network: NetworkSchema,
    address: t.String({ description: 'Sui: 0x + 64 hex digits; Tron: base58check with version byte 0x41' }),
    state: t.Union([t.Literal('active'), t.Literal('retired')], { description: 'A retired address is still watched forever and still credits the account' }),
    createdAt: DateTime,
    retiredAt: Nullable(DateTime),
  },
  { title: 'DepositAddress' },
)

export const DepositAddressList = t.Object({ depositAddresses: t.Array(DepositAddress), hasMore: t.Boolean() }, { title: 'DepositAddressList' })

export const ListQuery = t.Object({ after: t.Optional(t.String({ maxLength: 64 })), limit: PageLimitQuery })

export const AddressParams = t.Object({ id: t.String({ maxLength: 64 }), addressId: t.String({ maxLength: 64 }) })

export const CreateDepositBody = t.Object(
  {
    accountId: t.String({ maxLength: 64 }),
    asset: t.String({ maxLength: 20, examples: ['USDC'] }),
    network: t.Optional(t.String({ maxLength: 20, description: "The asset's network; may be left out" })),
    amount: RequestAmount,
  },
  { additionalProperties: false },
)

export const FundingInstructions = t.Object(
  {
    network: NetworkSchema,
    asset: t.String(),
    address: t.String({ description: "The account's deposit address on this rail" }),
    amount: DecimalAmount,
    expiresAt: DateTime,
  },
  { title: 'FundingInstructions', description: 'Send exactly amount of asset on network to address before expiresAt' },
)

export const Deposit = t.Object(
  {
    id: t.String({ examples: ['dep_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    intentId: Nullable(
      t.String({
        examples: ['txi_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'],
        description: 'A declared deposit is an intent: txi_ and the same identifier as its id; null for deposits that arrived undeclared',
      }),
    ),
    accountId: t.String(),
    asset: t.String(),
    network: NetworkSchema,
    source: t.Union([t.Literal('declared'), t.Literal('deposit_address'), t.Literal('suspense_assignment')]),
    state: t.Union([t.Literal('awaiting_funds'), t.Literal('confirming'), t.Literal('completed'), t.Literal('expired')]),
    expectedAmount: Nullable(DecimalAmount),
    receivedAmount: Nullable(DecimalAmount),
    amountMatch: Nullable(t.Union([t.Literal('exact'), t.Literal('under'), t.Literal('over')], { description: 'Received against expected, for declared deposits; the received amount is what is credited' })),
    address: t.String(),
    depositAddressId: Nullable(t.String()),
    txHash: Nullable(t.String()),
    fundingInstructions: Nullable(FundingInstructions),
    expiresAt: Nullable(DateTime),
    createdAt: DateTime,
    arrivedAt: Nullable(DateTime),
    completedAt: Nullable(DateTime),
  },
  { title: 'Deposit' },
)

export const DepositList = t.Object({ deposits: t.Array(Deposit), hasMore: t.Boolean() }, { title: 'DepositList' })

export const ListDepositsQuery = t.Object({
  accountId: t.Optional(t.String({ maxLength: 64 })),
  after: t.Optional(t.String({ maxLength: 64 })),
  limit: PageLimitQuery,
})

export const ArrivalBody = t.Object(
  {
    network: t.String({ maxLength: 20, examples: ['sui'] }),
    asset: t.String({ maxLength: 20, examples: ['USDC'] }),
    address: t.String({ maxLength: 100 }),
    amount: RequestAmount,
    txHash: t.String({ maxLength: 100, description: 'Tron: 64 hex digits; Sui: a base58 transaction digest (32 bytes)' }),
  },
  { additionalProperties: false },
)

export const ChainArrival = t.Object(
  {
    id: t.String({ examples: ['arr_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    orgId: t.String(),
    network: NetworkSchema,
    asset: t.String(),
    address: t.String(),
    amount: DecimalAmount,
    txHash: t.String(),
    block: t.String({ description: 'Tron block or Sui checkpoint that included the transfer' }),
    confirmations: t.Integer({ description: "Confirmations behind it now, on the organization's clock, capped at confirmationsRequired" }),
    confirmationsRequired: t.Integer(),
    state: t.Union([t.Literal('confirming'), t.Literal('final')]),
    disposition: t.Union([t.Literal('deposit'), t.Literal('suspense'), t.Literal('assigned'), t.Literal('returned')], {
      description: 'deposit: it funds an account\'s deposit; suspense: it matched nothing and waits for an operator, who assigned or returned it',
    }),
    accountId: Nullable(t.String()),
    depositId: Nullable(t.String()),
    observedAt: DateTime,
    finalAt: DateTime,
    resolvedAt: Nullable(DateTime),
    resolutionNote: Nullable(t.String()),
  },
  { title: 'ChainArrival' },
)

export const SuspenseList = t.Object({ arrivals: t.Array(ChainArrival), hasMore: t.Boolean() }, { title: 'SuspenseList' })

export const ListSuspenseQuery = t.Object({
  orgId: t.Optional(t.String({ maxLength: 64 })),
  disposition: t.Optional(t.Union([t.Literal('suspense'), t.Literal('assigned'), t.Literal('returned')])),
  after: t.Optional(t.String({ maxLength: 64 })),
  limit: PageLimitQuery,
})

export const AssignSuspenseBody = t.Object(
  { accountId: t.String({ maxLength: 64 }), note: t.Optional(t.String({ maxLength: 500 })) },
  { additionalProperties: false },
)

export const ReturnSuspenseBody = t.Object({ note: t.Optional(t.String({ maxLength: 500 })) }, { additionalProperties: false })

export type DepositAddressView = Static<typeof DepositAddress>
export type DepositView = Static<typeof Deposit>
export type ChainArrivalView = Static<typeof ChainArrival>
export type CreateDepositInput = Static<typeof CreateDepositBody>
export type CreateDepositAddressInput = Static<typeof CreateDepositAddressBody>
export type ArrivalInput = Static<typeof ArrivalBody>
