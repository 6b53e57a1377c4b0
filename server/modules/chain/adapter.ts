import type { Network } from './addresses.ts'

/** A withdrawal the chain adapter is asked to send. */
export interface OutgoingTransfer {
  withdrawalId: string
  orgId: string
  network: Network
  asset: string
  toAddress: string
  amountMinor: bigint
}

/** The unsigned transaction of a transfer; deterministic from the transfer (same transfer, same bytes and digest). */
export interface UnsignedTransaction {
  network: Network
  encoding: 'json'
  payload: string
  digest: string
}

/** What the chain says about a confirmed transaction. */
export interface ChainEvidence {
  txHash: string
  network: Network
  /** Tron block number or Sui checkpoint sequence number, as a decimal string. */
  block: string
  confirmations: number
  /** ISO-8601 time on the organization's clock when the transaction reached finality. */
  confirmedAt: string
}

export type WithdrawalOutcome =
  | { withdrawalId: string; orgId: string; status: 'completed'; evidence: ChainEvidence }
  | { withdrawalId: string; orgId: string; status: 'failed'; reason: string }

export interface ChainAdapter {
  buildUnsignedTransaction(transfer: OutgoingTransfer): UnsignedTransaction
  /** Broadcasts. Idempotent on withdrawalId (a second call returns the same txHash). Never called inside a DB transaction. */
  submitWithdrawal(transfer: OutgoingTransfer): Promise<{ txHash: string }>
  /** Outcomes are delivered at least once (also again after a restart until acknowledged): the listener must be idempotent. */
  onWithdrawalOutcome(listener: (outcome: WithdrawalOutcome) => Promise<void>): void
}
