import { Elysia, t } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import type { WithdrawalsContext } from './context.ts'
import type { WithdrawalView } from './model.ts'
import { CreateWithdrawalBody, ListWithdrawalsQuery, OperatorActionBody, RejectBody, Withdrawal, WithdrawalList } from './model.ts'
import * as service from './service.ts'

const STATES_DOC =
  'States: pending_approval (amount above the organization\'s approval threshold; event treasury.withdrawal.pending_approval) → approved (event treasury.withdrawal.approved; unsignedTransaction readable) → submitted (broadcast through the chain adapter; event treasury.withdrawal.submitted) → exactly one of confirmed (chainEvidence; event treasury.withdrawal.completed) or failed (funds back in available; event treasury.withdrawal.failed). pending_approval can also end rejected (funds back in available; event treasury.withdrawal.rejected). The event treasury.withdrawal.confirmed is reserved and never emitted: the move to confirmed is told by treasury.withdrawal.completed.'
const NOT_PENDING_DOC = 'A withdrawal that is not pending_approval answers 409 conflict.'

const OrgWithdrawalParams = t.Object({ orgId: t.String({ maxLength: 64 }), id: t.String({ maxLength: 64 }) })
const OrgParams = t.Object({ orgId: t.String({ maxLength: 64 }) })
const opsDoc = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

export function withdrawalsRoutes(withdrawals: WithdrawalsContext, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/withdrawals', prefix: '/v1' })
    .use(access)
    .post(
      '/withdrawals',
      (context) => context.answerInCommit(context, 201, () => service.createWithdrawal(withdrawals, context.principal, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateWithdrawalBody,
        response: { 201: Withdrawal },
        detail: apiDoc('Withdraw to an allowlisted destination', 'Withdrawals', {
          description: `Executes a withdrawal quote of the account to one of its active allowlist entries on the quote's network. The quote's totalDebited (amount + network fee + service fee) moves from available to inFlight in the same commit that consumes the quote. The destination is screened again (screening_rejected, nothing changes). Refusals change nothing and leave the quote open: quote_expired, quote_consumed, insufficient_available, account_frozen, screening_rejected, not_found (field names the missing resource), conflict (allowlist entry still in its 24 h timelock or removed), invalid_request (entry or quote of another account, or entry on another network). ${STATES_DOC}`,
        }),
      },
    )
    .get('/withdrawals', ({ query, principal }) => service.listWithdrawals(withdrawals, principal.orgId, query), {
      access: 'secret',
      query: ListWithdrawalsQuery,
      response: WithdrawalList,
      detail: apiDoc('List withdrawals', 'Withdrawals', { description: `Filter by accountId and state. Ordered by creation; pass the last id of a page as after for the next. ${STATES_DOC}` }),
    })
    .get('/withdrawals/:id', ({ params, principal }) => service.getWithdrawal(withdrawals, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Withdrawal,
      detail: apiDoc('Read a withdrawal', 'Withdrawals', { description: STATES_DOC }),
    })
    .post('/withdrawals/:id/approve', ({ params, principal }) => service.approveByKey(withdrawals, principal, params.id), {
      access: 'secret',
      params: IdParams,
      response: Withdrawal,
      detail: apiDoc('Approve a withdrawal with a second key', 'Withdrawals', {
        description: `Needs a secret key (test key on sandbox) of the organization other than the one that created the withdrawal: the creating key, and keys linked to it by rotation, answer 403 permission_denied and change nothing. Operators approve through /ops/v1. ${NOT_PENDING_DOC}`,
      }),
    })
    .post('/withdrawals/:id/reject', ({ params, body, principal }) => service.rejectByKey(withdrawals, principal, params.id, body?.reason), {
      access: 'secret',
      params: IdParams,
      body: t.Optional(RejectBody),
      response: Withdrawal,
      detail: apiDoc('Reject (cancel) a withdrawal awaiting approval', 'Withdrawals', {
        description: `Any secret key of the organization, including the creating one, may refuse: state rejected, the whole totalDebited back in available in the same commit. ${NOT_PENDING_DOC}`,
      }),
    })
}

/** The operator module's withdrawal actions, which record each in the operator audit trail. */
export interface OperatorWithdrawalActions {
  approveWithdrawal(id: string, operator: string, orgId?: string): Promise<WithdrawalView>
  rejectWithdrawal(id: string, operator: string, reason: string | undefined, orgId?: string): Promise<WithdrawalView>
}

/** Operator routes: the second approval through /ops/v1, and the queue of withdrawals waiting for it. */
export function withdrawalsOpsRoutes(withdrawals: WithdrawalsContext, operator: OperatorWithdrawalActions) {
  return new Elysia({ name: 'kassa/ops-withdrawals', prefix: '/ops/v1' })
    .get('/orgs/:orgId/withdrawals', ({ params, query }) => service.listWithdrawals(withdrawals, params.orgId, query), {
      params: OrgParams,
      query: ListWithdrawalsQuery,
      response: WithdrawalList,
      detail: opsDoc("List an organization's withdrawals", 'Filter with state=pending_approval for the approval queue.'),
    })
    .post(
      '/orgs/:orgId/withdrawals/:id/approve',
      ({ params, body }) => operator.approveWithdrawal(params.id, body?.operator ?? 'operator', params.orgId),
      {
        params: OrgWithdrawalParams,
        body: t.Optional(OperatorActionBody),
        response: Withdrawal,
        detail: opsDoc('Approve a withdrawal as an operator', `The operator is the second approver. Recorded in the operator audit trail as POST /ops/v1/withdrawals/{id}/approve is. ${NOT_PENDING_DOC}`),
      },
    )
    .post(
      '/orgs/:orgId/withdrawals/:id/reject',
      ({ params, body }) => operator.rejectWithdrawal(params.id, body?.operator ?? 'operator', body?.reason, params.orgId),
      {
        params: OrgWithdrawalParams,
        body: t.Optional(OperatorActionBody),
        response: Withdrawal,
        detail: opsDoc('Reject a withdrawal as an operator', `The whole totalDebited returns to available. Recorded in the operator audit trail as POST /ops/v1/withdrawals/{id}/reject is. ${NOT_PENDING_DOC}`),
      },
    )
}
