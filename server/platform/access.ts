import { Elysia } from 'elysia'
import type { ApiError } from '../lib/errors.ts'
import { principalOf, requireAccess, type Access, type Principal } from './auth.ts'
import { REPLAYED_HEADER, type IdempotencyStore } from './idempotency.ts'
import { jsonContentType, recordInlineFailure, runWithAnswerInCommit } from './idempotency-in-commit.ts'

const STATE_CHANGING_METHODS = new Set(['POST', 'PATCH', 'PUT', 'DELETE'])

/**
 * A route's access level, or the level plus `idempotency: 'inline'` for a route that writes its
 * idempotency record itself, in the same commit as its effect (the authorization hot path), instead
 * of claiming the key in a separate write before the handler runs.
 */
export type AccessOption = Access | { level: Access; idempotency: 'inline' | 'commit' }

/** The saved answer of an earlier request with the same key, marked as a replay: the same status, body and content type. */
export function replayResponse(status: number, body: string, headers: Record<string, unknown>): Response {
  const replayHeaders = new Headers()
  for (const [name, value] of Object.entries(headers)) replayHeaders.set(name, String(value))
  replayHeaders.set('content-type', jsonContentType(status))
  replayHeaders.set(REPLAYED_HEADER, 'true')
  return new Response(body, { status, headers: replayHeaders })
}

/**
 * An answer whose JSON text is already made (an authorization's, the same text as its saved
 * idempotent answer): sent as it is, with the headers gathered on `set` (request id, rate limits)
 * moved onto it, so it is not serialized again and Elysia need not copy it into a new Response to
 * merge them. The content type is the one Elysia gives a JSON answer.
 */
export function jsonResponse(status: number, body: string, set: { headers: Record<string, unknown> }): Response {
  const headers: Record<string, string> = {}
  for (const name in set.headers) headers[name] = String(set.headers[name])
  headers['content-type'] = 'application/json;charset=utf-8'
  set.headers = {}
  return new Response(body, { status, headers })
}

/**
 * The `access` route option: every `/v1` route names what it needs, and the same step applies
 * idempotency to state-changing calls made with organization context.
 */
export function accessPlugin(idempotency: IdempotencyStore, options: { testExitAfterCommit?: number } = {}) {
  let commitsBeforeExit = options.testExitAfterCommit ?? 0
  // The test switch KASSA_TEST_EXIT_AFTER_COMMIT (sandbox only, see server/config.ts): the process
  // ends between a commit and its answer, as a crash there would.
  const afterCommit = commitsBeforeExit > 0 ? () => {
    commitsBeforeExit -= 1
    if (commitsBeforeExit === 0) process.exit(97)
  } : undefined
  return new Elysia({ name: 'kassa/access' })
    /**
     * Answers a money-moving route whose Idempotency-Key is written in the commit of its effect
     * (route option `access: { level, idempotency: 'commit' }`): see `runWithAnswerInCommit`.
     */
    .decorate('answerInCommit', (context: { request: Request; principal: Principal; path: string; body?: unknown; set: { headers: Record<string, unknown> } }, status: number, handle: () => Promise<unknown>) =>
      runWithAnswerInCommit(idempotency, { ...context, orgId: context.principal.orgId, body: context.body }, status, handle, (keyed) => {
        if (keyed) afterCommit?.()
      }),
    )
    .macro({
    access: (option: AccessOption) => {
      const level = typeof option === 'string' ? option : option.level
      // 'inline' (the authorization) and 'commit' (every other money-moving route, through
      // `runWithAnswerInCommit`) write the key's record in the commit of their effect.
      const inline = typeof option !== 'string'
      const checks = {
        // Transform runs before validation: a caller without the right key learns nothing about the
        // body schema, and a publishable key gets 403 rather than a 400 about its body.
        transform({ request }: { request: Request }) {
          requireAccess(request, level)
        },
        // Transform has already refused a caller without the right key.
        resolve({ request }: { request: Request }) {
          return { principal: principalOf(request) as Principal }
        },
      }
      // A route that writes its idempotency record itself needs neither hook below: none is
      // registered for it, so its requests do not pass through two more steps that do nothing.
      if (inline) return checks
      return {
        ...checks,
        async beforeHandle({ request, body, set, path }: { request: Request; body: unknown; set: { headers: Record<string, unknown> }; path: string }) {
          if (!STATE_CHANGING_METHODS.has(request.method)) return
          const principal = requireAccess(request, level)
          if (principal === undefined) return
          const outcome = await idempotency.begin(request, principal, path, body)
          if (outcome.kind === 'replay') return replayResponse(outcome.status, outcome.body, set.headers)
        },
        async afterHandle({ request, response, set }: { request: Request; response: unknown; set: { status?: number | string } }) {
          if (response instanceof Response) return
          await idempotency.complete(request, typeof set.status === 'number' ? set.status : 200, JSON.stringify(response))
        },
      }
    },
  })
}

/** Called by the errors plugin: failures are saved for replay too, except refused input. */
export async function recordIdempotentFailure(
  idempotency: IdempotencyStore,
  request: Request,
  error: ApiError,
  response: Response,
): Promise<void> {
  if (await recordInlineFailure(request, error, response)) return
  // Most failures carry no claimed key (a shed or rate-limited request never claimed one): the
  // answer's body is copied only for a claim that saves it.
  if (!idempotency.claimed(request)) return
  // A request refused as invalid, or answered 503 partner_unavailable (nothing applied yet, or a
  // decided settlement with parts still to carry out), keeps no answer: the same key runs it again.
  if (error.code === 'invalid_request' || error.code === 'partner_unavailable') {
    await idempotency.release(request)
    return
  }
  await idempotency.complete(request, response.status, await response.clone().text())
}

export type AccessPlugin = ReturnType<typeof accessPlugin>
