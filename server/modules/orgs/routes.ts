import { Elysia, t } from 'elysia'
import { PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX, PageLimitQuery } from '../../lib/pagination.ts'
import { type IdempotencyStore } from '../../platform/idempotency.ts'
import { runOnceForOperator } from '../../platform/idempotency-in-commit.ts'
import { apiDoc } from '../../platform/openapi.ts'
import {
  ChecklistBody,
  CreatedOrganization,
  CreateOrganizationBody,
  IssuedKey,
  IssueKeyBody,
  KeySummary,
  LimitsBody,
  Organization,
  WithdrawalApproval,
  WithdrawalApprovalBody,
  RotatedKey,
  RotateKeyBody,
  SignOffBody,
} from './model.ts'
import * as service from './service.ts'
import type { OrgsContext } from './service.ts'

const OrgParams = t.Object({ orgId: t.String({ maxLength: 64 }) })
const KeyParams = t.Object({ keyId: t.String({ maxLength: 64 }) })
const doc = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

/** The operator API: onboarding organizations and managing their keys and limits. */
export function orgsOpsRoutes(orgs: OrgsContext, idempotency: IdempotencyStore) {
  return new Elysia({ name: 'kassa/ops-orgs', prefix: '/ops/v1' })
    .post(
      '/orgs',
      (context) => runOnceForOperator(idempotency, context, 201, () => service.createOrganization(orgs, context.body.name)),
      {
        body: CreateOrganizationBody,
        response: { 201: CreatedOrganization },
        detail: doc('Onboard an organization', 'Issues its sandbox keys: a test key and a sandbox publishable key, shown once.'),
      },
    )
    .get('/orgs', ({ query }) => service.listOrganizations(orgs, query), {
      query: t.Object({
        after: t.Optional(t.String({ maxLength: 64, description: 'An organization id: the page starts after it' })),
        limit: PageLimitQuery,
      }),
      response: t.Object({ orgs: t.Array(Organization), hasMore: t.Boolean() }),
      detail: doc(
        'List organizations',
        `A page at a time, in creation order, each with its keys (never their secrets); pass the last id as \`after\` for the next page. limit is 1 to ${PAGE_SIZE_MAX} (default ${PAGE_SIZE_DEFAULT}); anything else is invalid_request naming limit.`,
      ),
    })
    .get('/orgs/:orgId', ({ params }) => service.describeOrganization(orgs, params.orgId), {
      params: OrgParams,
      response: Organization,
      detail: doc('Read an organization with its keys (never their secrets)'),
    })
    .post(
      '/orgs/:orgId/keys',
      (context) => runOnceForOperator(idempotency, context, 201, () => service.issueOrganizationKey(orgs, context.params.orgId, context.body.type, context.body.environment)),
      {
        params: OrgParams,
        body: IssueKeyBody,
        response: { 201: IssuedKey },
        detail: doc('Issue a key', 'Test keys are sandbox only; production keys need the onboarding sign-off (409 conflict before it).'),
      },
    )
    .post(
      '/keys/:keyId/rotate',
      (context) => runOnceForOperator(idempotency, context, 201, () => service.rotateKey(orgs, context.params.keyId, context.body?.overlapSeconds)),
      {
        params: KeyParams,
        body: t.Optional(RotateKeyBody),
        response: { 201: RotatedKey },
        detail: doc('Rotate a key', 'Issues a replacement; the old key keeps working for overlapSeconds (24 h by default), then stops.'),
      },
    )
    .post('/keys/:keyId/revoke', ({ params }) => service.revokeKey(orgs, params.keyId), {
      params: KeyParams,
      response: KeySummary,
      detail: doc('Revoke a key', 'Takes effect on the very next request.'),
    })
    .patch('/orgs/:orgId/onboarding', ({ params, body }) => service.updateChecklist(orgs, params.orgId, body.items), {
      params: OrgParams,
      body: ChecklistBody,
      response: Organization,
      detail: doc('Mark onboarding checklist items'),
    })
    .post('/orgs/:orgId/onboarding/sign-off', ({ params, body }) => service.signOff(orgs, params.orgId, body.signedOffBy), {
      params: OrgParams,
      body: SignOffBody,
      response: Organization,
      detail: doc('Sign off onboarding', 'Every checklist item must be done; afterwards production keys can be issued.'),
    })
    .get('/orgs/:orgId/withdrawal-approval', ({ params }) => service.getWithdrawalApproval(orgs, params.orgId), {
      params: OrgParams,
      response: WithdrawalApproval,
      detail: doc("Read an organization's withdrawal approval thresholds", 'Per asset; withdrawals with an amount above the threshold wait in pending_approval for a second key.'),
    })
    .put('/orgs/:orgId/withdrawal-approval', ({ params, body }) => service.setWithdrawalApproval(orgs, params.orgId, body.asset, body.threshold), {
      params: OrgParams,
      body: WithdrawalApprovalBody,
      response: WithdrawalApproval,
      detail: doc(
        "Set an organization's withdrawal approval threshold for one asset",
        'Withdrawals whose amount (what arrives, fees excluded) is above the threshold wait in pending_approval until a different secret key of the organization or an operator approves them. "0" makes every withdrawal wait; null restores the default of 10000. Applies to withdrawals created afterwards.',
      ),
    })
    .patch('/orgs/:orgId/limits', ({ params, body }) => service.setRateLimit(orgs, params.orgId, body.rateLimitPerMinute), {
      params: OrgParams,
      body: LimitsBody,
      response: Organization,
      detail: doc("Raise or restore an organization's rate limit"),
    })
}
