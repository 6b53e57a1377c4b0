import { t, type Static } from 'elysia'

export const DecimalAmount = t.String({ pattern: '^(0|[1-9][0-9]*)(\\.[0-9]+)?$', maxLength: 40, examples: ['12.50'], description: 'A decimal string' })
/** A request amount: the exact format (and the asset's decimals) is checked by parseAmount. */
export const RequestAmount = t.String({ maxLength: 40, examples: ['12.50'], description: 'A positive decimal string with at most the asset\'s decimals' })

export const Allocation = t.Object({
  vaultId: t.String(),
  shares: t.String({ description: 'Shares held in the vault (free and locked for redemption)' }),
  value: t.String({ description: 'The shares at the vault\'s current price, rounded down' }),
})

export const Balance = t.Object(
  {
    asset: t.String({ examples: ['USDC'] }),
    total: DecimalAmount,
    available: DecimalAmount,
    held: DecimalAmount,
    inFlight: DecimalAmount,
    allocations: t.Array(Allocation, { description: 'Positions in vaults of this asset' }),
  },
  { title: 'Balance', description: 'Invariant: total = available + held + inFlight + sum(allocations.value)' },
)

export const AccountBalances = t.Object({ accountId: t.String(), balances: t.Array(Balance) }, { title: 'AccountBalances' })

export const FundBody = t.Object({ asset: t.String({ maxLength: 20 }), amount: RequestAmount }, { additionalProperties: false })

export const Funding = t.Object(
  { id: t.String(), accountId: t.String(), asset: t.String(), amount: DecimalAmount, balance: Balance },
  { title: 'SandboxFunding' },
)

export type BalanceView = Static<typeof Balance>
export type FundInput = Static<typeof FundBody>
export type FundingView = Static<typeof Funding>
