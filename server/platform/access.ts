import { Elysia } from 'elysia'
import type { ApiError } from '../lib/errors.ts'
import { requireAccess, type Access, type Principal } from './auth.ts'
import { REPLAYED_HEADER, type IdempotencyStore } from './idempotency.ts'

const STATE_CHANGING_METHODS = new Set(['POST', 'PATCH', 'PUT', 'DELETE'])

/**
 * The `access` route option: every `/v1` route names what it needs, and the same step applies
 * idempotency to state-changing calls made with organization context.
 */
export function accessPlugin(idempotency: IdempotencyStore) {
  return new Elysia({ name: 'kassa/access' }).macro({
    access: (level: Access) => ({
      // Transform runs before validation: a caller without the right key learns nothing about the
      // body schema, and a publishable key gets 403 rather than a 400 about its body.
      transform({ request }) {
        requireAccess(request, level)
      },
      resolve({ request }) {
        return { principal: requireAccess(request, level) as Principal }
      },
      async beforeHandle({ request, body, set, path }) {
        if (!STATE_CHANGING_METHODS.has(request.method)) return
        const principal = requireAccess(request, level)
        if (principal === undefined) return
        const outcome = await idempotency.begin(request, principal, path, body)
        if (outcome.kind === 'replay') {
          const headers = new Headers()
          for (const [name, value] of Object.entries(set.headers)) headers.set(name, String(value))
          headers.set('content-type', 'application/json')
          headers.set(REPLAYED_HEADER, 'true')
          return new Response(outcome.body, { status: outcome.status, headers })
        }
      },
      async afterHandle({ request, response, set }) {
        if (response instanceof Response) return
        await idempotency.complete(request, typeof set.status === 'number' ? set.status : 200, JSON.stringify(response))
      },
    }),
  })
}

/** Called by the errors plugin: failures are saved for replay too, except refused input. */
export async function recordIdempotentFailure(
  idempotency: IdempotencyStore,
  request: Request,
  error: ApiError,
  response: Response,
): Promise<void> {
  if (error.code === 'invalid_request') {
    await idempotency.release(request)
    return
  }
  await idempotency.complete(request, response.status, await response.clone().text())
}

export type AccessPlugin = ReturnType<typeof accessPlugin>
