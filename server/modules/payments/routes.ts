import { Elysia, t } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { arrivalOf } from '../../platform/arrival.ts'
import type { IdempotencyStore } from '../../platform/idempotency.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { histogramSchema } from '../ledger-ops/routes.ts'
import { AuthorizePaymentBody, CapturePaymentBody, ListPaymentsQuery, Payment, PaymentList } from './model.ts'
import { capturePayment, getPayment, listPayments, voidPayment } from './lifecycle.ts'
import { SLOW_PAGE_DEFAULT, SLOW_PAGE_MAX, slowAuthorizations } from './slow.ts'
import { DECLINE_RECORD_LAG_MAX_MS, paymentsStats, type PaymentsCore } from './state.ts'
import { AUTHORIZE_PATH, answerAuthorization } from './front.ts'
import { DECLINE_BACKLOG_MAX } from './repo.ts'
import { SLOW_AUTHORIZATIONS_KEPT_DEFAULT } from '../../config.ts'
import { DEFAULT_SHEDDING } from '../../platform/load-shedder.ts'

const STATES_DOC =
  'States: authorized → captured | voided | lapsed (uncaptured 24 h after authorization on the organization\'s clock, event payment.expired); declined is terminal from the start. Events: payment.authorized, payment.declined, payment.captured, payment.voided, payment.expired.'
const REFUSALS_DOC = 'Refused with hold_not_active (409) unless the payment is authorized (declined, captured, voided, or being captured or voided right now), and hold_expired (422) once it has lapsed or while its lapse is being committed.'

/** Operator routes of payments (under /ops/v1, authenticated by the operator token). */
export function paymentsOpsRoutes(core: PaymentsCore) {
  return new Elysia({ name: 'kassa/ops-payments', prefix: '/ops/v1' }).get('/payments/stats', () => paymentsStats(core), {
    response: t.Object({
      answerLatencyMs: histogramSchema(
        'authorizations answered',
        'From each authorization reaching this instance (before rate limiting and parsing) to its answer, approved or declined: the part of a caller\'s latency spent in the server. Malformed requests (400, 404) are not counted.',
      ),
      declineRecords: t.Object(
        {
          waiting: t.Integer({ description: 'Declines answered or being answered whose record is not durable yet' }),
          oldestWaitMs: t.Number({ description: 'How long the oldest of them has waited, being written included; 0 when none waits' }),
          refused: t.Integer({ description: `Authorizations refused 429 rate_limited since this instance started because ${DECLINE_BACKLOG_MAX} declines already waited for their records (a decline that could not be recorded is never answered)` }),
        },
        {
          description: `How far decline records are behind the answers. A decline waits for its record (so it is durable when answered) unless the database is failing, or it has no Idempotency-Key and the oldest waiting record has waited over ${DECLINE_RECORD_LAG_MAX_MS} ms (past capacity); those are answered at once and recorded behind, read from this instance's memory until then.`,
        },
      ),
      shedding: t.Object(
        {
          enabled: t.Boolean({ description: 'Load shedding is on (LOAD_SHEDDING, on a Postgres server)' }),
          share: t.Number({ description: 'The share of authorizations refused at once right now, 0 to 1' }),
          shed: t.Integer({ description: 'Authorizations shed since this instance started (refused 429 rate_limited in front of the app, before their body was read; nothing recorded)' }),
          shedOverdue: t.Integer({
            description: `Of them, those read while a turn of the event loop ran long (its next tick overdue by ${DEFAULT_SHEDDING.overdueMs} ms or more, its thread busy rather than stopped), shed whatever the share`,
          }),
          stalls: t.Integer({
            description:
              'Late ticks of the event loop since this instance started that did not count toward shedding because its thread was stopped rather than busy (it neither ran nor waited for a core for most of the time: the host took the core away, or a blocking call); read from Linux schedstat, 0 where that is unavailable',
          }),
        },
        {
          description: `Load shedding: while this instance's event loop runs late tick after tick (its one thread past capacity, not a single stall), a share of the authorizations is refused 429 rate_limited with Retry-After before their body is read (nothing decided, reserved or recorded, no payment id, an Idempotency-Key not used up: a refusal costs the thread and the database far less than a decline); the share grows while the lateness stands and falls back to 0 once ticks are on time. A tick late while the thread was stopped rather than busy counts as on time (stalls). Every authorization read while one turn of the loop has run long (its next tick ${DEFAULT_SHEDDING.overdueMs} ms or more overdue, its thread busy rather than stopped) is refused so too, whatever the share.`,
        },
      ),
    }),
    detail: apiDoc('Authorization latency of this instance', 'Operators', { security: 'operator', description: 'Benchmarks read it beside the callers\' own latencies.' }),
  })
    .get('/payments/slow', ({ query }) => slowAuthorizations(core.slow, query), {
      query: SlowAuthorizationsQuery,
      response: SlowAuthorizations,
      detail: apiDoc('Slow authorizations of this instance', 'Operators', {
        security: 'operator',
        description: `The authorizations that took SLOW_AUTHORIZATION_MS or longer from reaching this instance to their answer, of the latest SLOW_AUTHORIZATIONS_KEPT (default ${SLOW_AUTHORIZATIONS_KEPT_DEFAULT}) kept, a page at a time, oldest first, with where each approval's time went. Each is numbered in the order it was recorded (seq, from 1): after reads those after a seq (pass the last one of a page for the next; hasMore says whether newer ones follow, missed how many after it were overwritten before this read), and without it the newest. limit is ${SLOW_PAGE_DEFAULT} when left out, at most ${SLOW_PAGE_MAX}: the server's one thread builds the answer, and the whole log at once (the benchmark's 131,072) held it for up to 633 ms, past an authorization's budget. A caller on the same machine can set arrivedAtMs beside its own clock to see what happened before the server read the request and after it answered (the benchmark does: README, "Benchmarks").`,
      }),
    })
}

/** The range of both is checked by the service, which names the field (as `pageLimit` does for every list). */
const SlowAuthorizationsQuery = t.Object(
  {
    after: t.Optional(t.Integer({ description: 'A seq: the page starts after it. Left out: the newest page' })),
    limit: t.Optional(t.Integer({ description: `Page size, 1 to ${SLOW_PAGE_MAX}; ${SLOW_PAGE_DEFAULT} when left out` })),
  },
  { additionalProperties: false },
)

const Ms = (description: string) => t.Number({ description: `${description}, milliseconds` })

const SlowAuthorizations = t.Object({
  thresholdMs: t.Integer({ description: 'SLOW_AUTHORIZATION_MS: an authorization that took at least this long is kept' }),
  recorded: t.Integer({ description: 'Slow authorizations since this instance started, kept or since overwritten by newer ones' }),
  kept: t.Integer({ description: 'How many the log holds now, the newest (at most SLOW_AUTHORIZATIONS_KEPT)' }),
  missed: t.Integer({ description: 'Of those after `after`, how many were overwritten by newer ones before this read (0 without after)' }),
  hasMore: t.Boolean({ description: 'Whether newer kept authorizations follow this page' }),
  authorizations: t.Array(
    t.Object({
      seq: t.Integer({ description: 'Its number in the order this instance recorded slow authorizations, from 1' }),
      paymentId: t.Union([t.String(), t.Null()], { description: 'The payment; null for a replayed Idempotency-Key' }),
      state: t.Union([t.Literal('authorized'), t.Literal('declined'), t.Literal('replayed')]),
      failureCode: t.Union([t.String(), t.Null()]),
      arrivedAtMs: t.Number({ description: 'When the request reached this instance, Unix epoch milliseconds (fractional)' }),
      totalMs: Ms('From arrival (before rate limiting and parsing) to the answer'),
      phases: t.Union(
        [
          t.Object({
            beforeWriterMs: Ms('From arrival until the ledger writer had the approval: rate limiting, authentication, parsing, the decision and the reservation in memory'),
            queuedMs: Ms("In the writer's queue, until its batch was sent (the wait for the batch ahead to commit)"),
            commitMs: Ms('From its batch being sent to Postgres to the commit being confirmed (the statement, the disk flush, and the server reading the reply)'),
            afterCommitMs: Ms('From the confirmed commit to the answer'),
          }),
          t.Null(),
        ],
        { description: 'For an approval the writer committed; the four add up to totalMs. Null for declines and replays' },
      ),
      batchOperations: t.Union([t.Integer(), t.Null()], { description: 'Operations its batch carried' }),
      batchesAhead: t.Union([t.Integer(), t.Null()], { description: 'Batches already in flight ahead of its batch when that was sent' }),
    }),
  ),
})

export function paymentsRoutes(core: PaymentsCore, access: AccessPlugin, records: IdempotencyStore) {
  return new Elysia({ name: 'kassa/payments', prefix: '/v1' })
    .use(access)
    .post(
      AUTHORIZE_PATH.slice('/v1'.length),
      // A listening server answers this route in front of the app (./front.ts); the app's route
      // answers a request handed to `app.handle` directly, through the same function.
      ({ body, principal, set, request }) => answerAuthorization(core, records, principal.orgId, body, request, arrivalOf(request), set),
      {
        access: { level: 'secret', idempotency: 'inline' },
        body: AuthorizePaymentBody,
        response: { 201: Payment },
        detail: apiDoc('Authorize a payment', 'Payments', {
          description: `Synchronous, answered within a hard budget of 500 ms. Approved: 201 with state authorized, the amount held on the account until capture, void or lapse. Declined: 201 with state declined and failureCode, the same code a transfer or hold answers for the same reason (insufficient_available, account_frozen, limit_exceeded, min_amount, unsupported_asset; processing_timeout when the approval could not be made durable within the budget, or when the ledger writer's queue is past what the budget allows, processing_error when the database refused it). A declined authorization can never be captured. A decline is normally durable when answered; it is answered before its record is durable, and read from the answering instance's memory until then, when the database is failing, and past capacity when it has no Idempotency-Key and decline records are more than ${DECLINE_RECORD_LAG_MAX_MS} ms behind (a keyed decline still waits for its record within the budget, so its key answers the same everywhere). Every decline answered is recorded: when ${DECLINE_BACKLOG_MAX} declines already wait for their records on this instance (far past its capacity, or the database away for minutes), an authorization is refused 429 rate_limited with Retry-After instead, nothing of it authorized or recorded and no payment id given, so it can be sent again (its Idempotency-Key is not used up). The same 429 answers an authorization this instance sheds because its one thread is past its capacity (its event loop late tick after tick): refused in front of the rest of the request's handling (only a key that authenticates and is not publishable is shed; any other is answered as ever, 401 or 403), with Retry-After: 1 and without rate headers, not counted against the key's rate limit, nothing of it decided or recorded (GET /ops/v1/payments/stats, shedding). Malformed input is 400 invalid_request; an unknown account is 404. ${STATES_DOC}`,
        }),
      },
    )
    .post('/payments/:id/capture', (context) => context.answerInCommit(context, 200, () => capturePayment(core, context.principal.orgId, context.params.id, context.body ?? {})), {
      access: { level: 'secret', idempotency: 'commit' },
      params: IdParams,
      body: t.Optional(CapturePaymentBody),
      response: Payment,
      detail: apiDoc('Capture a payment', 'Payments', {
        description: `Once, for at most the authorized amount (default: all of it), to the organization's card-settlement account; the remainder returns to available in the same commit. State becomes captured. ${REFUSALS_DOC}`,
      }),
    })
    .post('/payments/:id/void', (context) => context.answerInCommit(context, 200, () => voidPayment(core, context.principal.orgId, context.params.id)), {
      access: { level: 'secret', idempotency: 'commit' },
      params: IdParams,
      response: Payment,
      detail: apiDoc('Void a payment', 'Payments', { description: `Releases the whole hold back to available. State becomes voided. ${REFUSALS_DOC}` }),
    })
    .get('/payments', ({ query, principal }) => listPayments(core, principal.orgId, query), {
      access: 'secret',
      query: ListPaymentsQuery,
      response: PaymentList,
      detail: apiDoc('List payments', 'Payments', { description: `Declines included. Ordered by creation; pass the last id of a page as after for the next. Filter by accountId, by state (state=authorized lists the authorizations still holding funds, to capture or void before they lapse), or both. ${STATES_DOC}` }),
    })
    .get('/payments/:id', ({ params, principal }) => getPayment(core, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Payment,
      detail: apiDoc('Read a payment', 'Payments', { description: STATES_DOC }),
    })
}
