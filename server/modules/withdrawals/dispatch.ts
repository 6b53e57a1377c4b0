import { appendEvent } from '../events/writer.ts'
import type { WithdrawalsContext } from './context.ts'
import * as repo from './repo.ts'
import { eventData, outgoingTransfer } from './views.ts'

// Broadcasting approved withdrawals: at once after approval, and by the sweep for those a restart,
// a failed broadcast or another instance left approved.

/** A failed broadcast is tried again after this long. */
export const DISPATCH_RETRY_MS = 1000
const DISPATCH_BATCH_MAX = 100

/** Broadcasts an approved withdrawal, outside any transaction; the adapter is idempotent on the withdrawal id. */
async function dispatch(context: WithdrawalsContext, row: repo.WithdrawalRecord): Promise<void> {
  const state = context.state
  if (state.dispatching.has(row.id)) return
  state.dispatching.add(row.id)
  try {
    const { txHash } = await context.chain.submitWithdrawal(outgoingTransfer(row))
    const now = context.clock.now(row.orgId)
    await context.db.transaction(async (tx) => {
      const submitted = await repo.transition(tx, row.id, ['approved'], { state: 'submitted', txHash, submittedAt: now })
      if (submitted) await appendEvent(tx, { orgId: row.orgId, type: 'treasury.withdrawal.submitted', data: eventData(submitted, { txHash }), created: now })
    })
  } finally {
    state.dispatching.delete(row.id)
  }
}

export function dispatchSoon(context: WithdrawalsContext, row: repo.WithdrawalRecord | repo.WithdrawalRow): void {
  void dispatch(context, row as repo.WithdrawalRecord).catch((error: unknown) => {
    console.error(`withdrawals: broadcasting ${row.id} failed; the sweep retries`, error)
    context.wakeSweep(context.clock.wallNowMs() + DISPATCH_RETRY_MS)
  })
}

/**
 * Broadcasts every approved withdrawal not yet submitted (after a restart, or when a broadcast
 * failed). Answers when to look again: after the retry delay if a broadcast failed or more are
 * waiting than one pass takes, otherwise undefined (the sweep's backstop).
 */
export async function dispatchApproved(context: WithdrawalsContext): Promise<number | undefined> {
  const rows = await repo.approvedWithdrawals(context.db, DISPATCH_BATCH_MAX, context.ownedOrganizations)
  const outcomes = await Promise.allSettled(rows.map((row) => dispatch(context, row)))
  let failed = false
  for (const outcome of outcomes) {
    if (outcome.status === 'rejected') {
      failed = true
      console.error('withdrawals: a broadcast failed; the next sweep retries', outcome.reason)
    }
  }
  return failed || rows.length === DISPATCH_BATCH_MAX ? context.clock.wallNowMs() + DISPATCH_RETRY_MS : undefined
}
