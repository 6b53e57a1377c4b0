import type { Database } from '../../../db/client.ts'
import { requireAsset } from '../../lib/assets.ts'
import { formatAmount } from '../../lib/money.ts'
import type { VaultCatalog } from '../vaults/service.ts'
import type { Cycles, CycleView } from './cycles.ts'
import * as repo from './repo.ts'

/** Intents listed per cycle; a cycle holding more says so with `hasMore` (its totals still count them all). */
const LISTED_MAX = 500

export interface CycleIntentView {
  id: string
  orgId: string
  accountId: string
  externalId: string
  state: repo.IntentRecord['state']
  reason: repo.IntentRecord['reason']
  amount: string | null
  fee: string
  shares: string | null
}

export interface CycleIntentsView {
  cycle: CycleView
  /** What a close, settle or roll back acts on: the confirmed intents. */
  pending: { intents: number; accounts: number; amount: string; fee: string; shares: string }
  intents: CycleIntentView[]
  hasMore: boolean
}

/**
 * A cycle with its intents, for an operator deciding to close, settle or roll it back: how many
 * intents wait, what amount (deposits: net amount and fee; redemptions: shares locked) and whose.
 */
export async function readCycleIntents(deps: { db: Database; cycles: Cycles; vaults: VaultCatalog }, cycleId: string): Promise<CycleIntentsView> {
  const cycle = await deps.cycles.require(cycleId)
  const vault = await deps.vaults.require(cycle.vaultId)
  const decimals = requireAsset(vault.asset).decimals
  const format = (value: bigint | null) => (value === null ? null : formatAmount(value, decimals))
  const rows = await repo.cycleIntents(deps.db, cycleId, LISTED_MAX + 1)
  const listed = rows.slice(0, LISTED_MAX)
  const confirmed = (await repo.confirmedIntents(deps.db, cycleId))
  let amount = 0n
  let fee = 0n
  let shares = 0n
  for (const row of confirmed) {
    if (cycle.kind === 'deposit') {
      amount += row.amount ?? 0n
      fee += row.fee
    } else shares += row.shares ?? 0n
  }
  return {
    cycle: await deps.cycles.view(cycle),
    pending: {
      intents: confirmed.length,
      accounts: new Set(confirmed.map((row) => row.accountId)).size,
      amount: formatAmount(amount, decimals),
      fee: formatAmount(fee, decimals),
      shares: formatAmount(shares, decimals),
    },
    intents: listed.map((row) => ({
      id: row.id,
      orgId: row.orgId,
      accountId: row.accountId,
      externalId: row.externalId,
      state: row.state,
      reason: row.reason,
      amount: format(row.amount),
      fee: formatAmount(row.fee, decimals),
      shares: format(row.shares),
    })),
    hasMore: rows.length > LISTED_MAX,
  }
}
