/** Schemas of save policies, accruals and yield reports (the OpenAPI document's source for them). */
import { t, type Static } from 'elysia'
import { DecimalAmount } from '../balances/model.ts'
import { PageLimitQuery } from '../../lib/pagination.ts'

export const SavePolicyBody = t.Object(
  {
    vaultId: t.String({ maxLength: 64, description: 'The vault the excess goes into' }),
    buffer: t.String({ maxLength: 40, examples: ['250.00'], description: 'Spend buffer: what stays available, in the vault\'s asset (0 allowed)' }),
    enabled: t.Boolean({ description: 'Off keeps the policy but runs nothing' }),
  },
  { additionalProperties: false },
)

export const SavePolicyRun = t.Object({
  day: t.String({ format: 'date', description: 'The organization\'s UTC date of the run' }),
  vaultId: t.String(),
  outcome: t.Union([t.Literal('subscribed'), t.Literal('skipped'), t.Literal('nothing_to_invest')]),
  reason: t.Union([t.String(), t.Null()], { description: 'Why a day was skipped: vault_paused, stale_price, below_minimum, account_frozen, insufficient_available, no_open_cycle' }),
  amount: t.Union([DecimalAmount, t.Null()], { description: 'What was subscribed (subscribed) or what was above the buffer (skipped)' }),
  intentId: t.Union([t.String(), t.Null()], { description: 'The subscription (txi_) the run made' }),
  createdAt: t.String({ format: 'date-time' }),
})

export const SavePolicy = t.Object(
  {
    accountId: t.String(),
    vaultId: t.String(),
    asset: t.String(),
    buffer: DecimalAmount,
    enabled: t.Boolean(),
    createdAt: t.String({ format: 'date-time' }),
    updatedAt: t.String({ format: 'date-time' }),
    recentRuns: t.Array(SavePolicyRun, { description: 'The latest runs, newest first (at most 7)' }),
  },
  { title: 'SavePolicy' },
)

export const Accrual = t.Object(
  {
    id: t.String({ description: 'acr_<date>_<vaultId>: unique within the account; what `after` takes' }),
    accountId: t.String(),
    vaultId: t.String(),
    day: t.String({ format: 'date', description: 'UTC date on the vaults\' clock' }),
    asset: t.String(),
    sharesOpen: DecimalAmount,
    sharesClose: DecimalAmount,
    timeWeightedShares: t.String({ description: 'Shares held, weighted by the time held in the day, rounded down' }),
    sharePriceOpen: t.String({ description: 'The vault\'s price in effect at the day\'s start' }),
    sharePriceClose: t.String({ description: 'The vault\'s price in effect at the day\'s end' }),
    grossYield: t.String({ description: 'netYield + platformFee' }),
    platformFee: DecimalAmount,
    netYield: t.String({ description: 'What the price moves added to the shares held (negative on a loss)' }),
    platformFeeBps: t.Integer(),
  },
  { title: 'Accrual' },
)

export const AccrualList = t.Object({ accruals: t.Array(Accrual), hasMore: t.Boolean() }, { title: 'AccrualList' })

const DateQuery = (description: string) => t.Optional(t.String({ maxLength: 10, description }))

export const AccrualQuery = t.Object({
  vaultId: t.Optional(t.String({ maxLength: 64 })),
  from: DateQuery('First day included (YYYY-MM-DD)'),
  to: DateQuery('Last day included (YYYY-MM-DD)'),
  after: t.Optional(t.String({ maxLength: 100, description: 'An accrual id: the page starts after it' })),
  limit: PageLimitQuery,
})

export const YieldReportQuery = t.Object({
  from: t.String({ maxLength: 10, description: 'First day included (YYYY-MM-DD)' }),
  to: t.String({ maxLength: 10, description: 'Last day included (YYYY-MM-DD), at most 366 days after from' }),
  accountId: t.Optional(t.String({ maxLength: 64 })),
  vaultId: t.Optional(t.String({ maxLength: 64 })),
})

export const YieldReportLine = t.Object({
  accountId: t.String(),
  vaultId: t.String(),
  asset: t.String(),
  days: t.Integer({ description: 'Accrual rows summed' }),
  grossYield: t.String(),
  platformFee: DecimalAmount,
  netYield: t.String(),
})

export const YieldReport = t.Object(
  {
    from: t.String({ format: 'date' }),
    to: t.String({ format: 'date' }),
    lines: t.Array(YieldReportLine, { description: 'One per account and vault with accruals in the period; each total is the exact sum of its rows' }),
  },
  { title: 'YieldReport' },
)

export type SavePolicyInput = Static<typeof SavePolicyBody>
export type SavePolicyView = Static<typeof SavePolicy>
export type AccrualView = Static<typeof Accrual>
export type AccrualQueryInput = Static<typeof AccrualQuery>
export type YieldReportQueryInput = Static<typeof YieldReportQuery>
export type YieldReportView = Static<typeof YieldReport>
