import type { ApiFailure, CycleInfo, CycleIntentsInfo, OperatorApi, VaultInfo, VaultPriceInfo } from '../api.ts'

/** An open or closed cycle with what is pending in it (the confirmed intents an action acts on). */
export interface CycleWithPending {
  cycle: CycleInfo
  pending: CycleIntentsInfo['pending'] | null
}

export interface VaultRow {
  vault: VaultInfo
  price: VaultPriceInfo | null
  deposit: CycleWithPending | null
  redeem: CycleWithPending | null
}

/** A decimal string without trailing zeros ("148.500000" -> "148.5"). */
export function plain(amount: string | null | undefined): string {
  if (amount === null || amount === undefined) return '–'
  return amount.includes('.') ? amount.replace(/\.?0+$/, '') : amount
}

/** A share price cut to 6 decimals for a column ("1.001120448..." -> "1.00112"); the API has all 18. */
export function sharePrice(price: string | null | undefined): string {
  if (price === null || price === undefined) return '–'
  const [whole, fraction = ''] = price.split('.')
  return plain(`${whole}.${fraction.slice(0, 6).padEnd(1, '0')}`)
}

/** Adds two decimal strings exactly. */
export function addDecimals(a: string, b: string): string {
  const digits = Math.max(a.split('.')[1]?.length ?? 0, b.split('.')[1]?.length ?? 0)
  const scaled = (value: string) => {
    const [whole, fraction = ''] = value.split('.')
    return BigInt(`${whole}${fraction.padEnd(digits, '0')}`)
  }
  const sum = (scaled(a) + scaled(b)).toString().padStart(digits + 1, '0')
  return digits === 0 ? sum : `${sum.slice(0, sum.length - digits)}.${sum.slice(sum.length - digits)}`
}

/** apy as a percentage with two decimals ("0.052000" -> "5.20%"), or "–" before 7 days of prices. */
export function percent(apy: string | null | undefined): string {
  if (apy === null || apy === undefined) return '–'
  return `${(Number(apy) * 100).toFixed(2)}%`
}

/** A cycle's intents and amount: what is pending while it can still be acted on, its recorded totals once finished. */
export function cycleTotals(entry: CycleWithPending, asset: string): { intents: string; amount: string } {
  const { cycle, pending } = entry
  if (pending !== null && (cycle.state === 'open' || cycle.state === 'closed')) {
    return {
      intents: String(pending.intents),
      amount: cycle.cycleKind === 'deposit' ? `${plain(pending.amount)} ${asset}` : `${plain(pending.shares)} sh`,
    }
  }
  const amount = cycle.cycleKind === 'deposit' ? cycle.totalAmount : cycle.totalShares
  return { intents: cycle.intents === null ? '–' : String(cycle.intents), amount: amount === null ? '–' : cycle.cycleKind === 'deposit' ? `${plain(amount)} ${asset}` : `${plain(amount)} sh` }
}

/** The pending totals of the cycles that can still be acted on (open and closed). */
export async function withPending(api: OperatorApi, cycles: CycleInfo[]): Promise<{ entries: CycleWithPending[]; failure: ApiFailure | null }> {
  let failure: ApiFailure | null = null
  const entries = await Promise.all(
    cycles.map(async (cycle) => {
      if (cycle.state !== 'open' && cycle.state !== 'closed') return { cycle, pending: null }
      const read = await api.cycleIntents(cycle.cycleId)
      if (!read.ok) {
        failure = read
        return { cycle, pending: null }
      }
      return { cycle: read.value.cycle, pending: read.value.pending }
    }),
  )
  return { entries, failure }
}

/** Every vault with its price and its open deposit and redeem cycles with their totals. */
export async function loadVaultRows(api: OperatorApi): Promise<{ ok: true; rows: VaultRow[]; failure: ApiFailure | null } | ApiFailure> {
  const list = await api.vaults()
  if (!list.ok) return list
  let failure: ApiFailure | null = null
  const rows = await Promise.all(
    list.value.vaults.map(async (vault): Promise<VaultRow> => {
      const [price, cycles] = await Promise.all([api.vaultPrice(vault.vaultId), api.cycles(vault.vaultId)])
      // A new vault has no price until the venue reports one (`stale_price` from this endpoint): its
      // row shows none, which is no error of the console's to report on every refresh.
      if (!price.ok && price.code !== 'stale_price') failure = price
      if (!cycles.ok) {
        failure = cycles
        return { vault, price: price.ok ? price.value : null, deposit: null, redeem: null }
      }
      const open = cycles.value.cycles.filter((cycle) => cycle.state === 'open')
      const pending = await withPending(api, open)
      if (pending.failure) failure = pending.failure
      return {
        vault,
        price: price.ok ? price.value : null,
        deposit: pending.entries.find((entry) => entry.cycle.cycleKind === 'deposit') ?? null,
        redeem: pending.entries.find((entry) => entry.cycle.cycleKind === 'redeem') ?? null,
      }
    }),
  )
  return { ok: true, rows, failure }
}
