import { Elysia, t } from 'elysia'
import { notify, type Database } from '../../../db/client.ts'
import { ApiError } from '../../lib/errors.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import type { Principal } from '../../platform/auth.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { CHANGE_CHANNEL } from '../../platform/changes.ts'
import type { Clock } from '../clock/clock.ts'

/** Sandbox helpers answer only test keys; other keys get permission_denied. */
export function requireTestKey(principal: Principal): void {
  if (principal.keyType !== 'test') throw new ApiError('permission_denied', 'Sandbox helpers need a test key (svc_test_)')
}

const AdvanceBody = t.Object(
  { seconds: t.Integer({ minimum: 1, maximum: 366 * 24 * 3600, description: 'How far to move the clock ahead, at most a year per call' }) },
  { additionalProperties: false },
)

/**
 * Registered only when SERVICE_ENV is sandbox, so production answers 404 for these paths. The clock
 * only moves forward: time-based rules never see time run backwards.
 */
export function sandboxRoutes({ db, clock }: { db: Database; clock: Clock }, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/sandbox', prefix: '/v1/sandbox' })
    .use(access)
    .get('/clock', ({ principal }) => ({ now: clock.now(principal.orgId).toISOString() }), {
      access: 'secret',
      response: t.Object({ now: t.String({ format: 'date-time' }) }),
      detail: apiDoc("Read the organization's clock", 'Sandbox'),
    })
    .post(
      '/clock/advance',
      async ({ body, principal }) => {
        requireTestKey(principal)
        const now = await clock.advance(principal.orgId, body.seconds)
        await notify(db, CHANGE_CHANNEL, JSON.stringify({ kind: 'clock', id: principal.orgId }))
        return { now: now.toISOString() }
      },
      {
        access: 'secret',
        body: AdvanceBody,
        response: t.Object({ now: t.String({ format: 'date-time' }) }),
        detail: apiDoc("Advance the organization's clock", 'Sandbox', {
          description: 'Test keys only. Every time-based rule of the organization (expiries, timelocks) reads this clock.',
        }),
      },
    )
}
