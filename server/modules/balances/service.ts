import { eventRow } from '../../ledger/events.ts'
import { SYSTEM_ACCOUNTS, type HotBalance } from '../../ledger/hot-balances.ts'
import type { LedgerOperation } from '../../ledger/writer.ts'
import { ApiError } from '../../lib/errors.ts'
import { answerInCommit } from '../../platform/idempotency.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import type { Runtime } from '../../runtime.ts'
import { ASSETS, requireAsset, type AssetInfo } from '../../lib/assets.ts'
import type { BalanceView, FundInput, FundingView } from './model.ts'

/** Sandbox funding is for testing flows, not for minting fortunes: one credit is at most this. */
const FUNDING_MAX_MINOR = 10_000_000n * 1_000_000n

export function toBalanceView(info: AssetInfo, row: HotBalance | undefined): BalanceView {
  const format = (value: bigint | undefined) => formatAmount(value ?? 0n, info.decimals)
  return {
    asset: info.asset,
    total: format(row?.total),
    available: format(row?.available),
    held: format(row?.held),
    inFlight: format(row?.inFlight),
    allocations: [],
  }
}

/** Served from memory: what has committed plus reservations already granted. */
export async function getBalances(runtime: Runtime, orgId: string, accountId: string): Promise<{ accountId: string; balances: BalanceView[] }> {
  await runtime.ledger.accounts.require(orgId, accountId)
  return { accountId, balances: ASSETS.map((info) => toBalanceView(info, runtime.ledger.balance(orgId, accountId, info.asset))) }
}

/** Credits an account from the organization's sandbox faucet, through the same ledger as everything else. */
export async function fundFromFaucet(runtime: Runtime, orgId: string, accountId: string, input: FundInput): Promise<FundingView> {
  const info = requireAsset(input.asset)
  const amountMinor = parseAmount(input.amount, info.decimals, 'amount')
  if (amountMinor > FUNDING_MAX_MINOR) throw new ApiError('limit_exceeded', `One sandbox funding is at most ${formatAmount(FUNDING_MAX_MINOR, info.decimals)}`, { field: 'amount' })
  const account = await runtime.ledger.accounts.require(orgId, accountId)
  const id = newId('mv')
  const now = runtime.clock.now(orgId)
  const amount = formatAmount(amountMinor, info.decimals)
  // The answer's balance is the account's as this funding is reserved: what it will be once committed.
  const view = () => ({ id, accountId, asset: info.asset, amount, balance: toBalanceView(info, runtime.ledger.balance(orgId, accountId, info.asset)) })
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
  await runtime.ledger.submit(operation)
  return answer ?? view()
}
