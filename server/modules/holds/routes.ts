import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { CaptureHoldBody, CreateHoldBody, Hold } from './model.ts'
import * as service from './service.ts'

export function holdsRoutes(deps: service.HoldsDeps, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/holds', prefix: '/v1' })
    .use(access)
    .post(
      '/holds',
      (context) => context.answerInCommit(context, 201, () => service.createHold(deps, context.principal.orgId, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateHoldBody,
        response: { 201: Hold },
        detail: apiDoc('Reserve funds', 'Holds', {
          description:
            'Moves amount from available to held. The hold is pending until captured, released, or expired: at expiresAt (on the organization\'s clock) it is released automatically.',
        }),
      },
    )
    .post('/holds/:id/capture', (context) => context.answerInCommit(context, 200, () => service.captureHold(deps, context.principal.orgId, context.params.id, context.body)), {
      access: { level: 'secret', idempotency: 'commit' },
      params: IdParams,
      body: CaptureHoldBody,
      response: Hold,
      detail: apiDoc('Capture a hold', 'Holds', {
        description:
          'Once, for at most the held amount (default: all of it), to a destination account, as a transfer with its fee. The remainder returns to available in the same commit. hold_not_active unless pending; hold_expired past its expiry.',
      }),
    })
    .post('/holds/:id/release', (context) => context.answerInCommit(context, 200, () => service.releaseHold(deps, context.principal.orgId, context.params.id)), {
      access: { level: 'secret', idempotency: 'commit' },
      params: IdParams,
      response: Hold,
      detail: apiDoc('Release a hold', 'Holds', { description: 'Returns the whole hold to available. hold_not_active unless pending; hold_expired past its expiry.' }),
    })
    .get('/holds/:id', ({ params, principal }) => service.getHold(deps, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Hold,
      detail: apiDoc('Read a hold', 'Holds'),
    })
}
