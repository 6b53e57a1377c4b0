import { eventRow } from '../events/write-sets.ts'
import { SYSTEM_ACCOUNTS, type HotBalance } from '../../ledger/hot-balances.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import { ApiError } from '../../lib/errors.ts'
import { answerInCommit } from '../../platform/idempotency-in-commit.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { Clock } from '../clock/clock.ts'
import { ASSETS, requireAsset, type AssetInfo } from '../../lib/assets.ts'
import type { BalanceView, FundInput, FundingView } from './model.ts'

/** Sandbox funding is for testing flows, not for minting fortunes: one credit is at most this. */
const FUNDING_MAX_MINOR = 10_000_000n * 1_000_000n

/** What balances read and move: the ledger and the organizations' clocks. */
export interface BalancesDeps {
  ledger: Ledger
  clock: Clock
}

/** An account's position in a vault, valued at the vault's current price (rounded down). */
export interface AllocationValue {
  vaultId: string
  shares: bigint
  value: bigint
}

/** Where allocations come from (earning); none when earning is off. */
export type AllocationSource = (orgId: string, accountId: string, asset: string) => Promise<AllocationValue[]>

export function toBalanceView(info: AssetInfo, row: HotBalance | undefined, allocations: AllocationValue[] = []): BalanceView {
  const format = (value: bigint | undefined) => formatAmount(value ?? 0n, info.decimals)
  const allocated = allocations.reduce((sum, allocation) => sum + allocation.value, 0n)
  return {
    asset: info.asset,
    total: format((row?.total ?? 0n) + allocated),
    available: format(row?.available),
    held: format(row?.held),
    inFlight: format(row?.inFlight),
    allocations: allocations.map((allocation) => ({ vaultId: allocation.vaultId, shares: format(allocation.shares), value: format(allocation.value) })),
  }
}

/** Served from memory: what has committed plus reservations already granted. */
export async function getBalances(deps: Pick<BalancesDeps, 'ledger'>, orgId: string, accountId: string, allocations?: AllocationSource): Promise<{ accountId: string; balances: BalanceView[] }> {
  await deps.ledger.accounts.require(orgId, accountId)
  const balances: BalanceView[] = []
  for (const info of ASSETS) {
    const positions = allocations === undefined ? [] : await allocations(orgId, accountId, info.asset)
    balances.push(toBalanceView(info, deps.ledger.balance(orgId, accountId, info.asset), positions))
  }
  return { accountId, balances }
}

/** Credits an account from the organization's sandbox faucet, through the same ledger as everything else. */
export async function fundFromFaucet(deps: BalancesDeps, orgId: string, accountId: string, input: FundInput): Promise<FundingView> {
  const info = requireAsset(input.asset)
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  if (amountMinor > FUNDING_MAX_MINOR) throw new ApiError('limit_exceeded', `One sandbox funding is at most ${formatAmount(FUNDING_MAX_MINOR, info.decimals)}`, { field: 'amount' })
  const account = await deps.ledger.accounts.require(orgId, accountId)
  const id = newId('mv')
  const now = deps.clock.now(orgId)
  const amount = formatAmount(amountMinor, info.decimals)
  // The answer's balance is the account's as this funding is reserved: what it will be once committed.
  const view = () => ({ id, accountId, asset: info.asset, amount, balance: toBalanceView(info, deps.ledger.balance(orgId, accountId, info.asset)) })
  let answer: FundingView | undefined
  const operation: LedgerOperation = {
    orgId,
    movementId: id,
    movementKind: 'sandbox_funding',
    reference: id,
    createdAt: now,
    postings: [
      { accountId: SYSTEM_ACCOUNTS.faucet, kind: 'system', bucket: 'available', asset: info.asset, amountMinor: -amountMinor },
      { accountId: account.id, kind: 'customer', bucket: 'available', asset: info.asset, amountMinor },
    ],
    events: [eventRow(orgId, 'account.funded', { accountId: account.id, externalId: account.externalId, asset: info.asset, amount, source: 'sandbox_faucet' }, now)],
    reserve: () => {
      answer = view()
      operation.idempotencyRecord = answerInCommit(answer)
    },
  }
  await deps.ledger.submit(operation)
  return answer ?? view()
}
