import { findAsset } from '../../lib/assets.ts'
import { formatAmount } from '../../lib/money.ts'
import type { OutgoingTransfer } from '../chain/adapter.ts'
import type { WithdrawalView } from './model.ts'
import type * as repo from './repo.ts'

export function decimalsOf(asset: string): number {
  return findAsset(asset)?.decimals ?? 0
}

export function toWithdrawalView(row: repo.WithdrawalRow): WithdrawalView {
  const format = (value: bigint) => formatAmount(value, decimalsOf(row.asset))
  return {
    id: row.id,
    accountId: row.accountId,
    allowlistEntryId: row.allowlistEntryId,
    quoteId: row.quoteId,
    network: row.network,
    asset: row.asset,
    address: row.address,
    amount: format(row.amount),
    fees: { network: format(row.networkFee), service: format(row.serviceFee) },
    totalDebited: format(row.totalDebited),
    state: row.state,
    approval: {
      required: row.approvalRequired,
      approvedBy: row.approvedByType ? { type: row.approvedByType, id: row.approvedBy ?? null } : null,
      approvedAt: row.approvedAt?.toISOString() ?? null,
    },
    rejectedBy: row.rejectedByType ? { type: row.rejectedByType, id: row.rejectedBy ?? null } : null,
    unsignedTransaction: (row.unsignedTransaction ?? null) as WithdrawalView['unsignedTransaction'],
    txHash: row.txHash ?? null,
    chainEvidence: row.chainEvidence ?? null,
    failureReason: row.failureReason ?? null,
    createdAt: row.createdAt.toISOString(),
    submittedAt: row.submittedAt?.toISOString() ?? null,
    closedAt: row.closedAt?.toISOString() ?? null,
  }
}

/** The data of every `treasury.withdrawal.*` event: the contract's id, accountId, amount, address, plus asset and network. */
export function eventData(row: repo.WithdrawalRow, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { id: row.id, accountId: row.accountId, amount: formatAmount(row.amount, decimalsOf(row.asset)), address: row.address, asset: row.asset, network: row.network, ...extra }
}

export function outgoingTransfer(row: repo.WithdrawalRow): OutgoingTransfer {
  return { withdrawalId: row.id, orgId: row.orgId, network: row.network, asset: row.asset, toAddress: row.address, amountMinor: row.amount }
}
