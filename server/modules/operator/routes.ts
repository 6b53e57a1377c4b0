import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { IdempotencyStore } from '../../platform/idempotency.ts'
import { operatorIdempotency } from '../../platform/operator-idempotency.ts'
import { apiDoc } from '../../platform/openapi.ts'
import type { Database } from '../../../db/client.ts'
import { Withdrawal } from '../withdrawals/model.ts'
import { ApprovalQueue, ApproveBody, OperatorActionList, OperatorActionsQuery, QueueQuery, RejectBody, StreamQuery, WithdrawalDetail } from './model.ts'
import type { OperatorService } from './service.ts'
import { eventStream, STREAM_POLL_MS } from './stream.ts'

const opsDoc = (summary: string, description: string) => apiDoc(summary, 'Operators', { security: 'operator', description })
const AUDIT_DOC =
  'Recorded in the operator audit trail (GET /ops/v1/operator-actions) with the operator named and the fingerprint of the token used, and emitted as an operator.action event in the organization\'s log, in the same commit as the change; a refused action (which changes nothing) is recorded in the trail with its error code, without an event. ' +
  'Honours Idempotency-Key: the same key with the same body answers the first answer again (Idempotent-Replayed: true) and records nothing more.'

export function operatorRoutes(db: Database, service: OperatorService, idempotency: IdempotencyStore) {
  return new Elysia({ name: 'kassa/ops-operator', prefix: '/ops/v1' })
    .use(operatorIdempotency(idempotency, service.tokenFingerprint))
    .get('/withdrawal-approvals', ({ query }) => service.approvalQueue(query.limit), {
      query: QueueQuery,
      response: ApprovalQueue,
      detail: opsDoc(
        'The approval queue: withdrawals waiting for a second approval, across organizations',
        'Every organization\'s withdrawals in pending_approval, newest first, with the organization, the destination screened again now (pass, reject with its reason, or unavailable) and the age on the organization\'s clock. limit is 1 to 200 (default 100); hasMore says more are waiting.',
      ),
    })
    .get('/withdrawals/:id', ({ params }) => service.withdrawalDetail(params.id), {
      params: IdParams,
      response: WithdrawalDetail,
      detail: opsDoc('Read any organization\'s withdrawal with its quote', 'The withdrawal, the quote it executed, its destination screened again now, and the operator actions taken on it.'),
    })
    .post('/withdrawals/:id/approve', ({ params, body }) => service.approveWithdrawal(params.id, body.operator), {
      params: IdParams,
      body: ApproveBody,
      response: Withdrawal,
      detail: opsDoc(
        'Approve a withdrawal as an operator (second approval)',
        `The operator is the second approver: the withdrawal becomes approved and is broadcast. One that is not pending_approval answers 409 conflict. ${AUDIT_DOC}`,
      ),
    })
    .post('/withdrawals/:id/reject', ({ params, body }) => service.rejectWithdrawal(params.id, body.operator, body.reason), {
      params: IdParams,
      body: RejectBody,
      response: Withdrawal,
      detail: opsDoc(
        'Reject a withdrawal as an operator',
        `The reason is required; the whole totalDebited returns to available. One that is not pending_approval answers 409 conflict. ${AUDIT_DOC}`,
      ),
    })
    .get('/operator-actions', ({ query }) => service.listActions(query), {
      query: OperatorActionsQuery,
      response: OperatorActionList,
      detail: opsDoc('The operator audit trail', 'Every operator action, newest first: who (the operator named), when, what, on which target, from which token (fingerprint), and whether it succeeded. Filter by targetId; limit 1 to 200 (default 50).'),
    })
    .get('/events/stream', ({ query, request }) => eventStream({ db }, query, request.headers.get('last-event-id') ?? undefined, request.signal), {
      query: StreamQuery,
      detail: opsDoc(
        'Follow the event log across organizations (Server-Sent Events)',
        `text/event-stream of every organization's events and the platform-wide ones, in log order, each as an SSE message whose id is the event id and whose data is {id, orgId, type, created, data}. ` +
          `Reconnect with the Last-Event-ID header (or after=) set to the last id received to get exactly the events that followed, none lost or repeated. Without a cursor the stream starts at the end of the log, after the last backlog matching events. ` +
          `types filters by exact types and namespaces (treasury.*), comma-separated, at most 20; orgId by organization. New events are sent within ${STREAM_POLL_MS} ms of their commit; a quiet stream sends a comment every 5 s. ` +
          'The stream is read at the client\'s pace: a client that stops reading holds its cursor, not the server\'s memory. An unknown cursor is 400 invalid_request naming Last-Event-ID or after.',
      ),
    })
}
