import type { Ledger } from '../../ledger/ledger.ts'
import type { AllocationValue } from '../balances/service.ts'
import { valueOf } from '../vaults/prices.ts'
import { sharesAsset, type VaultCatalog } from '../vaults/service.ts'

/** An account's vault positions in one asset: free plus locked shares, valued at the current price, rounded down. */
export function allocationSource(ledger: Ledger, vaults: VaultCatalog) {
  return async (orgId: string, accountId: string, asset: string): Promise<AllocationValue[]> => {
    const positions: AllocationValue[] = []
    for (const vault of await vaults.list()) {
      if (vault.asset !== asset) continue
      const row = ledger.balance(orgId, accountId, sharesAsset(vault.id))
      const shares = (row?.available ?? 0n) + (row?.held ?? 0n)
      if (shares === 0n) continue
      const { price } = await vaults.currentPrice(vault)
      positions.push({ vaultId: vault.id, shares, value: valueOf(shares, price) })
    }
    return positions
  }
}
