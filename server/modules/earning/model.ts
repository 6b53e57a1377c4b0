import { t, type Static } from 'elysia'
import { RequestAmount } from '../balances/model.ts'

const IntentState = t.Union([t.Literal('confirmed'), t.Literal('settled'), t.Literal('cancelled')])
const Reason = t.Union([t.Literal('cancelled'), t.Literal('rollback'), t.Null()], { description: 'Why a cancelled intent was cancelled' })

const intentFields = {
  id: t.String({ examples: ['txi_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
  recordId: t.String({ description: 'What a cancel takes (POST /v1/subscriptions/cancel)' }),
  accountId: t.String(),
  vaultId: t.String(),
  state: IntentState,
  reason: Reason,
  settlementCycle: t.Union([t.Integer(), t.Null()], { description: 'The number of the cycle it settles in; null for an instant redemption' }),
  createdAt: t.String({ format: 'date-time' }),
  settledAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
}

export const Subscription = t.Object(
  {
    ...intentFields,
    amount: t.String({ description: 'Net amount in the cycle (after the subscription fee)' }),
    fee: t.String({ description: 'Subscription fee withheld' }),
    shares: t.Union([t.String(), t.Null()], { description: 'Shares credited at settlement (amount ÷ cycle price, rounded down)' }),
  },
  { title: 'Subscription' },
)

export const Redemption = t.Object(
  {
    ...intentFields,
    mode: t.Union([t.Literal('queued'), t.Literal('instant')]),
    shares: t.String({ description: 'Shares locked (queued) or redeemed (instant)' }),
    amount: t.Union([t.String(), t.Null()], { description: 'Proceeds once settled (this intent\'s part of the account\'s aggregated payout)' }),
    fee: t.String(),
    payout: t.Union([t.Literal('direct'), t.Literal('claimable'), t.Null()]),
    claimedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    quoteId: t.Union([t.String(), t.Null()]),
  },
  { title: 'Redemption' },
)

export const Claim = t.Object(
  {
    accountId: t.String(),
    vaultId: t.String(),
    amount: t.String({ description: 'Claimed proceeds, now available' }),
    intentIds: t.Array(t.String()),
    digest: t.String(),
  },
  { title: 'Claim' },
)

export const CreateSubscriptionBody = t.Object(
  { accountId: t.String({ maxLength: 64 }), vaultId: t.String({ maxLength: 64 }), amount: RequestAmount },
  { additionalProperties: false },
)

export const CancelSubscriptionBody = t.Object({ recordId: t.String({ maxLength: 64 }) }, { additionalProperties: false })

export const CreateRedemptionBody = t.Object(
  {
    accountId: t.String({ maxLength: 64 }),
    vaultId: t.String({ maxLength: 64 }),
    mode: t.Union([t.Literal('queued'), t.Literal('instant')]),
    shares: t.Optional(t.String({ maxLength: 40, description: 'Shares to redeem (queued mode)' })),
    quoteId: t.Optional(t.String({ maxLength: 64, description: 'An instant_redeem quote (instant mode): it names the shares and itemizes the fee' })),
  },
  { additionalProperties: false },
)

export const CreateClaimBody = t.Object({ accountId: t.String({ maxLength: 64 }), vaultId: t.String({ maxLength: 64 }) }, { additionalProperties: false })

export const ListIntentsQuery = t.Object({ accountId: t.Optional(t.String({ maxLength: 64 })) })

export const Cycle = t.Object(
  {
    cycleId: t.String(),
    vaultId: t.String(),
    cycleKind: t.Union([t.Literal('deposit'), t.Literal('redeem')]),
    settlementCycle: t.Integer(),
    state: t.Union([t.Literal('open'), t.Literal('closed'), t.Literal('settled'), t.Literal('rolled_back')]),
    openedAt: t.String(),
    closedAt: t.Union([t.String(), t.Null()]),
    finishedAt: t.Union([t.String(), t.Null()]),
    sharePrice: t.Union([t.String(), t.Null()]),
    totalAmount: t.Union([t.String(), t.Null()]),
    totalShares: t.Union([t.String(), t.Null()]),
    fee: t.Union([t.String(), t.Null()]),
    intents: t.Union([t.Integer(), t.Null()]),
  },
  { title: 'VaultCycle' },
)

export type CreateSubscriptionInput = Static<typeof CreateSubscriptionBody>
export type CreateRedemptionInput = Static<typeof CreateRedemptionBody>
export type SubscriptionView = Static<typeof Subscription>
export type RedemptionView = Static<typeof Redemption>

export const CycleIntents = t.Object(
  {
    cycle: Cycle,
    pending: t.Object(
      {
        intents: t.Integer({ description: 'Confirmed intents: what a close, settle or roll back acts on' }),
        accounts: t.Integer({ description: 'Distinct accounts among them' }),
        amount: t.String({ description: 'Deposit cycles: their net amounts (a roll back gives back amount + fee)' }),
        fee: t.String({ description: 'Deposit cycles: subscription fees withheld' }),
        shares: t.String({ description: 'Redeem cycles: shares locked' }),
      },
    ),
    intents: t.Array(
      t.Object({
        id: t.String(),
        orgId: t.String(),
        accountId: t.String(),
        externalId: t.String({ description: 'The account\'s id in its organization' }),
        state: IntentState,
        reason: Reason,
        amount: t.Union([t.String(), t.Null()], { description: 'Deposits: net amount; redemptions: proceeds once settled' }),
        fee: t.String(),
        shares: t.Union([t.String(), t.Null()], { description: 'Redemptions: shares locked; deposits: shares credited once settled' }),
      }),
    ),
    hasMore: t.Boolean({ description: 'More than 500 intents: the first 500 are listed, the totals count all' }),
  },
  { title: 'VaultCycleIntents' },
)
