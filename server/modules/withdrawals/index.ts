import { EVERY_ORGANIZATION, type OwnedOrganizations } from '../../platform/ownership.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { DueSweep } from '../../platform/due-sweep.ts'
import type { ChainAdapter, WithdrawalOutcome } from '../chain/adapter.ts'
import { createWithdrawalsState, type WithdrawalsContext } from './context.ts'
import { dispatchApproved, DISPATCH_RETRY_MS } from './dispatch.ts'
import { withdrawalsOpsRoutes, withdrawalsRoutes, type OperatorWithdrawalActions } from './routes.ts'
import { applyOutcome, approveByOperator, rejectByOperator, type AlongsideWrite } from './service.ts'

/**
 * Approved withdrawals not yet broadcast (after a restart, a failed broadcast, or another instance
 * that stopped before broadcasting) are looked for at least this often (see `DueSweep`).
 */
const DISPATCH_SWEEP_BACKSTOP_MS = 2000

export interface WithdrawalsModuleDeps extends Pick<WithdrawalsContext, 'db' | 'ledger' | 'clock' | 'screening' | 'requireActiveEntry' | 'approvalThresholdMinor'> {
  /** Builds and broadcasts withdrawals, and reports their outcomes. */
  chain: ChainAdapter
  access: AccessPlugin
  /** In cluster mode, the organizations this server owns: its sweep broadcasts their withdrawals only. */
  ownedOrganizations?: OwnedOrganizations
}

/**
 * Withdrawals: created from a quote to an allowlisted destination, approved by a second key or an
 * operator, broadcast through the chain adapter and closed by its outcome. `start` registers the
 * outcome listener (before the chain starts delivering outcomes) and starts the broadcast sweep;
 * `stop` ends the sweep and waits for the work of this process on any withdrawal.
 */
export function createWithdrawalsModule(deps: WithdrawalsModuleDeps) {
  const context: WithdrawalsContext = {
    db: deps.db,
    ledger: deps.ledger,
    clock: deps.clock,
    chain: deps.chain,
    screening: deps.screening,
    requireActiveEntry: deps.requireActiveEntry,
    approvalThresholdMinor: deps.approvalThresholdMinor,
    state: createWithdrawalsState(),
    ownedOrganizations: deps.ownedOrganizations ?? EVERY_ORGANIZATION,
    wakeSweep: (wallMs) => sweep.wake(wallMs),
  }
  const sweep = new DueSweep(
    { name: 'withdrawals', backstopMs: DISPATCH_SWEEP_BACKSTOP_MS, minGapMs: DISPATCH_RETRY_MS, wallNowMs: () => deps.clock.wallNowMs() },
    () => dispatchApproved(context),
  )
  return {
    routes: withdrawalsRoutes(context, deps.access),
    /** The operator routes: the approval queue of one organization and its operator approvals, which the operator module records. */
    opsRoutes: (operator: OperatorWithdrawalActions) => withdrawalsOpsRoutes(context, operator),
    /** What the operator module does to withdrawals, each with its audit record written alongside. */
    operatorActions: {
      approve: (orgId: string, id: string, operator: string, alongside?: AlongsideWrite) => approveByOperator(context, orgId, id, operator, alongside),
      reject: (orgId: string, id: string, operator: string, reason: string | undefined, alongside?: AlongsideWrite) =>
        rejectByOperator(context, orgId, id, operator, reason, alongside),
    },
    /** Applies one chain outcome, as the listener does (tests replay outcomes with it). */
    applyOutcome: (outcome: WithdrawalOutcome) => applyOutcome(context, outcome),
    /** One broadcast pass, as the sweep runs it. */
    dispatchApproved: () => dispatchApproved(context),
    start(): void {
      deps.chain.onWithdrawalOutcome((outcome) => applyOutcome(context, outcome))
      sweep.start()
    },
    async stop(): Promise<void> {
      await sweep.stop()
      await Promise.allSettled([...context.state.locks.values()])
    },
  }
}

export type WithdrawalsModule = ReturnType<typeof createWithdrawalsModule>
export type WithdrawalOperatorActions = WithdrawalsModule['operatorActions']
