import { Elysia } from 'elysia'
import { replayResponse } from './access.ts'
import type { Principal } from './auth.ts'
import type { IdempotencyStore } from './idempotency.ts'

/**
 * Idempotency for operator writes (POST under /ops/v1): the operator's keys live in their own
 * space, apart from every organization's, named after the token's fingerprint. `.use()` it at the
 * top of an operator routes instance; its hooks reach that instance's routes only.
 */
export function operatorIdempotency(idempotency: IdempotencyStore, tokenFingerprint: string) {
  const principal: Principal = { orgId: `ops:${tokenFingerprint}`, keyId: tokenFingerprint, keyType: 'secret' }
  return new Elysia()
    .onBeforeHandle({ as: 'scoped' }, async ({ request, body, set, path }) => {
      if (request.method !== 'POST') return
      const outcome = await idempotency.begin(request, principal, path, body)
      if (outcome.kind === 'replay') return replayResponse(outcome.status, outcome.body, set.headers)
    })
    .onAfterHandle({ as: 'scoped' }, async ({ request, response, set }) => {
      if (request.method !== 'POST' || response instanceof Response) return
      await idempotency.complete(request, typeof set.status === 'number' ? set.status : 200, JSON.stringify(response))
    })
}

export type OperatorIdempotencyPlugin = ReturnType<typeof operatorIdempotency>
