import type { Database, Executor } from '../../../db/client.ts'
import { ApiError, notFound } from '../../lib/errors.ts'
import { sha256Hex } from '../../lib/hash.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount } from '../../lib/money.ts'
import { pageLimit } from '../../lib/pagination.ts'
import type { Clock } from '../clock/clock.ts'
import type { Screening } from '../screening/screening.ts'
import { requireAsset } from '../../lib/assets.ts'
import { appendEvent } from '../events/writer.ts'
import type { AlongsideWrite } from '../withdrawals/service.ts'
import { toWithdrawalView } from '../withdrawals/views.ts'
import type { WithdrawalView } from '../withdrawals/model.ts'
import type { OperatorActionView, QueueItemView } from './model.ts'
import * as repo from './repo.ts'

/** The event every recorded operator action emits, in the target organization's log. */
export const OPERATOR_ACTION_EVENT = 'operator.action'
const QUEUE_LIMIT_DEFAULT = 100

type Screened = { outcome: 'pass' | 'reject' | 'unavailable'; reason: string | null }

function toActionView(row: repo.OperatorActionRecord | repo.OperatorActionRow): OperatorActionView {
  return {
    id: row.id,
    operator: row.operator,
    tokenFingerprint: row.tokenFingerprint,
    action: row.action,
    targetId: row.targetId,
    orgId: row.orgId ?? null,
    outcome: row.outcome,
    errorCode: row.errorCode ?? null,
    detail: row.detail,
    createdAt: row.createdAt.toISOString(),
  }
}

/** What an operator asked for, before it is known whether it succeeds. */
export interface ActionRequest {
  operator: string
  action: string
  targetId: string
  orgId: string | null
  detail: Record<string, unknown>
}

/** What the withdrawals module lets an operator do, each with the audit record written alongside. */
export interface WithdrawalActions {
  approve(orgId: string, id: string, operator: string, alongside?: AlongsideWrite): Promise<WithdrawalView>
  reject(orgId: string, id: string, operator: string, reason: string | undefined, alongside?: AlongsideWrite): Promise<WithdrawalView>
}

/** What the operator services work with. */
export interface OperatorContext {
  db: Database
  clock: Clock
  /** Screens each queued destination again. */
  screening: Pick<Screening, 'screen'>
  /** The one operator token of this server: its fingerprint names it in the audit trail. */
  operatorToken: string
  withdrawals: WithdrawalActions
}

export type OperatorService = ReturnType<typeof createOperatorService>

/**
 * Operator actions and the views the console needs. Every action is recorded with the operator's
 * name and the fingerprint of the token used: a change with its record and its `operator.action`
 * event in the same commit; a refusal (which changed nothing) with its record alone.
 */
export function createOperatorService(context: OperatorContext) {
  // One operator token per server: its fingerprint tells which token acted after a rotation.
  const tokenFingerprint = sha256Hex(context.operatorToken).slice(0, 16)

  function actionRow(request: ActionRequest, outcome: 'succeeded' | 'refused', errorCode: string | null, now: Date): repo.OperatorActionRow {
    return { id: newId('opa'), tokenFingerprint, outcome, errorCode, createdAt: now, ...request }
  }

  /** A successful action: its record and its event, on the transaction of the change. */
  async function record(tx: Executor, row: repo.OperatorActionRow): Promise<void> {
    await repo.insertAction(tx, row)
    await appendEvent(tx, { orgId: row.orgId ?? null, type: OPERATOR_ACTION_EVENT, data: toActionView(row), created: row.createdAt })
  }

  /** Runs an action whose change records `request` alongside itself; a refusal is recorded on its own and thrown again. */
  async function audited<T>(request: ActionRequest, run: (alongside: AlongsideWrite) => Promise<T>): Promise<T> {
    try {
      return await run((tx, _changed, now) => record(tx, actionRow(request, 'succeeded', null, now)))
    } catch (error) {
      if (!(error instanceof ApiError)) throw error
      const now = request.orgId === null ? new Date(context.clock.wallNowMs()) : context.clock.now(request.orgId)
      // A refusal changed nothing, so it is no event (an organization's log tells what happened to
      // its resources); the audit trail still shows the attempt.
      await repo.insertAction(context.db, actionRow(request, 'refused', error.code, now))
      throw error
    }
  }

  async function screen(row: repo.WithdrawalRecord): Promise<Screened> {
    try {
      await context.screening.screen({ orgId: row.orgId, accountId: row.accountId, network: row.network, address: row.address }, 'destination')
      return { outcome: 'pass', reason: null }
    } catch (error) {
      if (!(error instanceof ApiError)) throw error
      if (error.code === 'screening_rejected') return { outcome: 'reject', reason: error.message }
      return { outcome: 'unavailable', reason: error.message }
    }
  }

  async function requireOrgOf(id: string): Promise<string> {
    const found = await repo.findWithdrawalAnyOrg(context.db, id)
    if (!found) throw notFound('withdrawal')
    return found.withdrawal.orgId
  }

  async function orgOrNull(id: string): Promise<string | null> {
    return (await repo.findWithdrawalAnyOrg(context.db, id))?.withdrawal.orgId ?? null
  }

  return {
    tokenFingerprint,

    /** Withdrawals waiting for a second approval across organizations, newest first, each screened again. */
    async approvalQueue(limitAsked: number | undefined): Promise<{ withdrawals: QueueItemView[]; hasMore: boolean }> {
      const limit = pageLimit(limitAsked, { fallback: QUEUE_LIMIT_DEFAULT, max: 200 })
      const rows = await repo.pendingApprovals(context.db, limit + 1)
      const page = rows.slice(0, limit)
      const items = await Promise.all(
        page.map(async ({ withdrawal: row, orgName }) => ({
          id: row.id,
          orgId: row.orgId,
          orgName,
          accountId: row.accountId,
          amount: formatAmount(row.amount, requireAsset(row.asset, 'asset').decimals),
          asset: row.asset,
          network: row.network,
          destination: row.address,
          screening: await screen(row),
          createdAt: row.createdAt.toISOString(),
          ageSeconds: Math.max(0, Math.floor((context.clock.now(row.orgId).getTime() - row.createdAt.getTime()) / 1000)),
        })),
      )
      return { withdrawals: items, hasMore: rows.length > limit }
    },

    async withdrawalDetail(id: string) {
      const found = await repo.findWithdrawalAnyOrg(context.db, id)
      if (!found) throw notFound('withdrawal')
      const row = found.withdrawal
      const decimals = requireAsset(row.asset, 'asset').decimals
      const quote = await repo.findQuoteAnyOrg(context.db, row.orgId, row.quoteId)
      const actions = await repo.listActions(context.db, { targetId: id, limit: 50 })
      return {
        orgId: row.orgId,
        orgName: found.orgName,
        withdrawal: toWithdrawalView(row),
        quote: quote
          ? {
              id: quote.id,
              state: quote.state,
              amount: formatAmount(quote.amount, decimals),
              networkFee: formatAmount(quote.networkFee, decimals),
              serviceFee: formatAmount(quote.serviceFee, decimals),
              totalDebited: formatAmount(quote.totalDebited, decimals),
              createdAt: quote.createdAt.toISOString(),
              expiresAt: quote.expiresAt.toISOString(),
            }
          : null,
        screening: await screen(row),
        actions: actions.map(toActionView),
      }
    },

    /** Approves as the second approver; `orgId` given by the organization-scoped route, found from the id otherwise. */
    async approveWithdrawal(id: string, operator: string, orgId?: string): Promise<WithdrawalView> {
      const request: ActionRequest = { operator, action: 'withdrawal.approve', targetId: id, orgId: orgId ?? (await orgOrNull(id)), detail: {} }
      return audited(request, async (alongside) => context.withdrawals.approve(orgId ?? (await requireOrgOf(id)), id, operator, alongside))
    },

    async rejectWithdrawal(id: string, operator: string, reason: string | undefined, orgId?: string): Promise<WithdrawalView> {
      const request: ActionRequest = { operator, action: 'withdrawal.reject', targetId: id, orgId: orgId ?? (await orgOrNull(id)), detail: { reason: reason ?? null } }
      return audited(request, async (alongside) => context.withdrawals.reject(orgId ?? (await requireOrgOf(id)), id, operator, reason, alongside))
    },

    /**
     * Runs an operator action of another module (vaults, cycles): `run` calls `alongside(tx)` in the
     * transaction of its change, which records the action and its event there; an action that
     * changed nothing (already in that state) is recorded on its own, with its event; a refusal as
     * withdrawals' are.
     */
    async audit<T>(request: ActionRequest, run: (alongside: (tx: Executor) => Promise<void>) => Promise<T>): Promise<T> {
      const now = () => (request.orgId === null ? new Date(context.clock.wallNowMs()) : context.clock.now(request.orgId))
      let recorded = false
      const result = await audited(request, (_withdrawal) =>
        run(async (tx) => {
          await record(tx, actionRow(request, 'succeeded', null, now()))
          recorded = true
        }),
      )
      if (!recorded) {
        await context.db.transaction(async (tx) => record(tx, actionRow({ ...request, detail: { ...request.detail, changed: false } }, 'succeeded', null, now())))
      }
      return result
    },

    async listActions(query: { targetId?: string; limit?: number }): Promise<{ actions: OperatorActionView[] }> {
      const limit = pageLimit(query.limit, { fallback: 50, max: 200 })
      return { actions: (await repo.listActions(context.db, { targetId: query.targetId, limit })).map(toActionView) }
    },
  }
}
