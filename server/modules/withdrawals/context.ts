import { type OwnedOrganizations } from '../../platform/ownership.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { ChainAdapter } from '../chain/adapter.ts'
import type { Clock } from '../clock/clock.ts'
import type { Screening } from '../screening/screening.ts'
import type { AllowlistEntryRecord } from '../allowlist/repo.ts'

/** This process's withdrawal state, made once per module by `createWithdrawalsModule`. */
export interface WithdrawalsState {
  /** Quotes a withdrawal of this process is executing right now (decided, not yet committed). */
  claimedQuotes: Set<string>
  /**
   * Per withdrawal, the tail of the work this process does on it (approve, reject, apply an outcome):
   * each step reads the withdrawal only after the previous one finished, so it never acts on a state
   * that its predecessor has just changed.
   */
  locks: Map<string, Promise<unknown>>
  /** Withdrawals this process is broadcasting right now. */
  dispatching: Set<string>
}

export function createWithdrawalsState(): WithdrawalsState {
  return { claimedQuotes: new Set(), locks: new Map(), dispatching: new Set() }
}

/** What the withdrawals services work with; the cross-module needs come from `app.ts`. */
export interface WithdrawalsContext {
  db: Database
  ledger: Ledger
  clock: Clock
  /** Builds and broadcasts the outgoing transfers. */
  chain: Pick<ChainAdapter, 'buildUnsignedTransaction' | 'submitWithdrawal'>
  /** Screens the destination again at withdrawal time. */
  screening: Pick<Screening, 'screen'>
  /** The allowlist entry a withdrawal names, if it can be used now (the allowlist module). */
  requireActiveEntry(orgId: string, id: string, field: string): Promise<AllowlistEntryRecord>
  /** The amount above which a withdrawal waits for a second approval (the organizations module). */
  approvalThresholdMinor(orgId: string, asset: string): Promise<bigint>
  state: WithdrawalsState
  /** Tells the broadcast sweep to look again at a wall-clock time (a no-op before it starts). */
  wakeSweep(wallMs: number): void
  /** The organizations whose approved withdrawals this server broadcasts (in cluster mode, those it owns). */
  ownedOrganizations: OwnedOrganizations
}
