import { Elysia, t } from 'elysia'
import { ApiError } from '../../lib/errors.ts'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { OperatorIdempotencyPlugin } from '../../platform/operator-idempotency.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { OperatorActBody } from '../vaults/model.ts'
import type { AuditOperatorAction } from '../vaults/service.ts'
import type { Cycles } from './cycles.ts'
import type { CycleIntentsView } from './cycle-intents.ts'
import { CancelSubscriptionBody, Claim, CreateClaimBody, CreateRedemptionBody, CreateSubscriptionBody, Cycle, CycleIntents, Redemption, Subscription } from './model.ts'
import type { Redemptions } from './redemptions.ts'
import type { Subscriptions } from './subscriptions.ts'

const ops = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

export function earningRoutes(subscriptions: Subscriptions, redemptions: Redemptions, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/earning', prefix: '/v1' })
    .use(access)
    .post(
      '/subscriptions',
      (context) => context.answerInCommit(context, 201, () => subscriptions.create(context.principal.orgId, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateSubscriptionBody,
        response: { 201: Subscription },
        detail: apiDoc('Subscribe to a vault', 'Earning', {
          description:
            'A deposit intent (txi_) in the vault\'s open deposit cycle, state confirmed, event transaction.deposit.confirmed. The amount leaves available at once: the subscription fee (if the vault has one, rounded up) is withheld and the net amount waits in inFlight until the cycle settles, when it buys shares at the cycle\'s price (net ÷ price, rounded down). Errors: min_amount (amount), insufficient_available, stale_price and conflict (paused vault) naming vaultId, not_found, account_frozen.',
        }),
      },
    )
    .post('/subscriptions/cancel', (context) => context.answerInCommit(context, 200, () => subscriptions.cancel(context.principal.orgId, context.body.recordId)), {
      access: { level: 'secret', idempotency: 'commit' },
      body: CancelSubscriptionBody,
      response: Subscription,
      detail: apiDoc('Cancel a subscription by its recordId', 'Earning', {
        description:
          'While its cycle is open: state cancelled, reason cancelled, the net amount back to available (the subscription fee withheld is kept), event transaction.deposit.cancelled. Works on paused vaults. conflict (recordId) once its cycle closed or it is no longer confirmed.',
      }),
    })
    .get('/subscriptions/:id', ({ params, principal }) => subscriptions.get(principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Subscription,
      detail: apiDoc('Read a subscription', 'Earning'),
    })
    .post(
      '/redemptions',
      (context) => context.answerInCommit(context, 201, () => redemptions.create(context.principal.orgId, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateRedemptionBody,
        response: { 201: Redemption },
        detail: apiDoc('Redeem shares', 'Earning', {
          description:
            'mode queued: the shares are locked (they stay in allocations), state confirmed, event transaction.redeem.confirmed with estimatedProceeds on direct-payout vaults. At the redeem cycle\'s settlement the account is paid once for all its redemptions in the cycle (walletTotal = value of its locked shares at the cycle price, rounded down), each redemption getting its part by locked shares, rounded down, the remainder to the one with the most shares (the earliest on a tie): to available (direct) or claimable (inFlight until POST /v1/claims). Errors: min_amount (shares), insufficient_available (shares), conflict (paused vault).',
        }),
      },
    )
    .get('/redemptions/:id', ({ params, principal }) => redemptions.get(principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Redemption,
      detail: apiDoc('Read a redemption', 'Earning'),
    })
    .post('/claims', (context) => context.answerInCommit(context, 200, () => redemptions.claim(context.principal.orgId, context.body)), {
      access: { level: 'secret', idempotency: 'commit' },
      body: CreateClaimBody,
      response: Claim,
      detail: apiDoc('Claim settled redemption proceeds', 'Earning', {
        description:
          'Claimable-payout vaults: moves every settled, unclaimed redemption\'s proceeds of the account in the vault from inFlight to available in one movement; event transaction.claim.confirmed. Works on paused vaults. not_found (vaultId) when there is nothing to claim.',
      }),
    })
}

const CycleParams = t.Object({ id: t.String({ maxLength: 64 }) })

/** Operators move cycles on (under /ops/v1, operator token); every POST honours Idempotency-Key. */
const AUDIT_DOC =
  'Recorded in the operator audit trail (GET /ops/v1/operator-actions) with the operator named (body operator, "operator" when left out) and the fingerprint of the token used, and emitted as a platform-wide operator.action event, in the same commit as the change; a repeat that changes nothing is recorded too (detail.changed false), a refusal with its error code and no event.'

/** Cluster mode: who may ask for an organization's part of a cycle (this server itself, or another server of the cluster). */
export interface CyclePartsAccess {
  authorized(request: Request): boolean
}

const PartParams = t.Object({ id: t.String({ maxLength: 64 }), orgId: t.String({ maxLength: 64 }) })

const CLUSTER_DOC =
  'In cluster mode the outcome is decided once on the cycle (a settlement\'s price included) and carried out per organization by its owner; while an owner does not answer the call is 503 partner_unavailable, the cycle stays closed with its outcome decided (the opposite action is then conflict), and a retry, with the same Idempotency-Key or another, finishes it.'

export function earningOpsRoutes(idempotent: OperatorIdempotencyPlugin, cycles: Cycles, listCycles: (vaultId: string) => Promise<unknown[]>, cycleIntents: (cycleId: string) => Promise<CycleIntentsView>,
  audit: AuditOperatorAction,
  parts?: CyclePartsAccess,
) {
  const act = async (kind: 'close' | 'settle' | 'rollback', cycleId: string, operator: string | undefined) =>
    cycles.view(await audit({ operator: operator ?? 'operator', action: `vault_cycle.${kind}`, targetId: cycleId, orgId: null, detail: {} }, (alongside) => cycles[kind](cycleId, alongside)))
  const routes = new Elysia({ name: 'kassa/ops-earning', prefix: '/ops/v1' })
    .use(idempotent)
    .get('/vaults/:id/cycles', async ({ params }) => ({ cycles: (await listCycles(params.id)) as never[] }), {
      params: CycleParams,
      response: t.Object({ cycles: t.Array(Cycle) }),
      detail: ops('A vault\'s cycles, newest first'),
    })
    .get('/vault-cycles/:id/intents', ({ params }) => cycleIntents(params.id), {
      params: CycleParams,
      response: CycleIntents,
      detail: ops(
        'A cycle with its intents',
        'The cycle, its intents across organizations (oldest first, at most 500, hasMore beyond) with their accounts, and the totals of the confirmed ones: what a close, settle or roll back acts on (deposits: net amount and fee; redemptions: shares locked). not_found for an unknown cycle.',
      ),
    })
    .post('/vault-cycles/:id/close', ({ params, body }) => act('close', params.id, body?.operator), {
      params: CycleParams,
      body: OperatorActBody,
      response: Cycle,
      detail: ops('Close a cycle', 'No more intents join it; the next cycle opens. Sends vault.cycle.closed with its totals. A cycle past open is answered as it is. ' + AUDIT_DOC + ' Honours Idempotency-Key (operator keys live apart from every organization\'s): a retry with the same key answers the first answer again.'),
    })
    .post('/vault-cycles/:id/settle', ({ params, body }) => act('settle', params.id, body?.operator), {
      params: CycleParams,
      body: OperatorActBody,
      response: Cycle,
      detail: ops(
        'Settle a cycle',
        'Closes it if open, takes one fresh price from the venue and settles every intent in one transaction (vault.cycle.settled, one transaction.*.settled per intent). Settling a settled cycle changes nothing; a rolled-back one is conflict. ' + CLUSTER_DOC + ' ' + AUDIT_DOC + ' Honours Idempotency-Key (operator keys live apart from every organization\'s): a retry with the same key answers the first answer again.',
      ),
    })
    .post('/vault-cycles/:id/rollback', ({ params, body }) => act('rollback', params.id, body?.operator), {
      params: CycleParams,
      body: OperatorActBody,
      response: Cycle,
      detail: ops(
        'Roll back an open or closed cycle',
        'Every intent cancelled with reason rollback and given back exactly (a subscription\'s whole amount, its fee included; a redemption\'s shares unlocked); vault.cycle.rolled_back. Repeating it changes nothing; a settled cycle is conflict. ' + CLUSTER_DOC + ' ' + AUDIT_DOC + ' Honours Idempotency-Key (operator keys live apart from every organization\'s): a retry with the same key answers the first answer again.',
      ),
    })
    .post('/vault-cycles/run', async () => ({ settled: await cycles.runOnce() }), {
      response: t.Object({ settled: t.Integer() }),
      detail: ops('Run the cadence step now', 'Closes and settles every cycle whose vault cadence has elapsed (what the cycle worker does each pass).'),
    })
  if (parts === undefined) return routes
  // Cluster mode only, and only between the servers of the cluster: one organization's part of a
  // cycle's decided settlement or roll back, answered by the organization's owner (the gate
  // forwards it there). Not part of the operator API.
  return routes.post(
    '/vault-cycles/:id/parts/:orgId',
    async ({ params, request }) => {
      if (!parts.authorized(request)) throw new ApiError('not_found', 'No such route', { field: 'path' })
      return { cycleId: params.id, orgId: params.orgId, intents: await cycles.carryOutPart(params.id, params.orgId) }
    },
    { params: PartParams, response: t.Object({ cycleId: t.String(), orgId: t.String(), intents: t.Integer() }), detail: { hide: true } },
  ) as unknown as typeof routes
}
