import { TypeCompiler } from '@sinclair/typebox/compiler'
import { ValidationError } from 'elysia'
import { ApiError } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { pathnameOf } from '../../lib/url.ts'
import { jsonResponse, replayResponse } from '../../platform/access.ts'
import { countRequest, rateLimited, secretKeyOf, type AuthDependencies } from '../../platform/auth.ts'
import { parseJsonBody } from '../../platform/body.ts'
import { errorResponse, failureAnswer, toApiError } from '../../platform/errors.ts'
import { idempotencyKeyOf, requestHashOf, type IdempotencyStore, type InlineIdempotency } from '../../platform/idempotency.ts'
import type { LoadShedder } from '../../platform/load-shedder.ts'
import type { LoopLag } from '../../platform/loop-lag.ts'
import { authorizePayment } from './authorize.ts'
import { AuthorizePaymentBody, type AuthorizePaymentInput } from './model.ts'
import { overloadedRefusal, type PaymentsCore } from './state.ts'

export const AUTHORIZE_PATH = '/v1/payments/authorize'

/** What the front reads: the payments' core, the idempotency records, the key cache and rate limiter, the shedder and the loop's clock. */
export interface AuthorizationFrontDeps {
  core: PaymentsCore
  records: IdempotencyStore
  auth: AuthDependencies
  /** The load shedder in force, read for each authorization; undefined when shedding is off (see `Runtime.shedder`). */
  shedder: () => LoadShedder | undefined
  loopLag: LoopLag
  bodyLimitBytes: number
}

/** A shed authorization's refusal; its text never changes, so it is made once. */
const SHED_REFUSAL = overloadedRefusal('it shed this authorization before reading it')

/**
 * Load shedding, in front of the app: the authorizations the shedder picks (a share of them while
 * the loop runs late tick after tick, and every one read while a turn of the loop runs long) are
 * refused 429 `rate_limited` with `Retry-After` before anything else (no rate count, no body read):
 * nothing is decided, reserved or recorded, no payment id is given out, and an Idempotency-Key is
 * not used up, so the request can be sent again as it was. Only a request whose key authenticates
 * and is not publishable can be shed; any other goes on, and is refused as ever (401, 403). A shed
 * request is not counted against its key's rate limit: it was not served. Past capacity the
 * server's one thread is the bottleneck, and the refusal is what it spends on most requests there:
 * in front of the app it cost the thread about a third less than from a request hook after
 * authentication and rate limiting (docs/architecture.md, "Load shedding"). Answers undefined
 * (having read the clock and two properties) unless the shedder is shedding.
 */
function authorizationShed(deps: AuthorizationFrontDeps): (request: Request) => Response | undefined {
  return (request) => {
    const shedder = deps.shedder()
    if (shedder === undefined) return undefined
    const clock = deps.loopLag
    const overdueMs = clock.overdueMs()
    if (!shedder.mayShed(overdueMs)) return undefined
    if (secretKeyOf(deps.auth, request) === undefined || !shedder.shouldShed(overdueMs, () => clock.busyShareSinceTick())) return undefined
    return errorResponse(SHED_REFUSAL, newId('req'))
  }
}

/**
 * The authorization once its caller is known to hold a secret key and its body is valid: the
 * Idempotency-Key held in this instance while it runs (its record is written in the
 * authorization's own commit, so a request with a key costs no extra round trip and stays inside
 * the budget), the decision, and the answer with the headers gathered on `set`. The app's route
 * and the front below both answer through it.
 */
export async function answerAuthorization(
  core: PaymentsCore,
  records: IdempotencyStore,
  orgId: string,
  body: AuthorizePaymentInput,
  request: Request,
  receivedAt: number,
  set: { headers: Record<string, unknown> },
): Promise<Response> {
  const key = idempotencyKeyOf(request)
  let idempotency: InlineIdempotency | undefined
  if (key !== undefined) {
    if (!records.holdLocally(orgId, key)) {
      throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
    }
    idempotency = { orgId, key, method: request.method, path: AUTHORIZE_PATH, requestHash: requestHashOf(request.method, AUTHORIZE_PATH, body), requestBody: body }
  }
  try {
    const answer = await authorizePayment(core, orgId, body, { receivedAt, idempotency, records })
    if (answer.kind === 'replay') return replayResponse(answer.status, answer.body, set.headers)
    // The payment view was serialized once, for this answer and its saved idempotent answer
    // alike; the route's Payment schema documents it (tests check the answers against it).
    return jsonResponse(201, answer.body, set)
  } finally {
    if (key !== undefined) records.releaseLocally(orgId, key)
  }
}

/**
 * `POST /v1/payments/authorize` answered in front of Elysia, the product's hot path. Every step
 * is the app's own, in the app's order, with the same functions: the shedder; then, for a caller
 * presenting a key that authenticates and is not publishable, the request id, the rate count and
 * its headers, the body (the body plugin's limit and refusals), the compiled `AuthorizePaymentBody`
 * (a failure answered as Elysia's validation error is, field named), and the route's answer. Any
 * other caller (no key, a key that fails, a publishable key) goes to the app untouched, which
 * counts and refuses it as for every route. What is left out is Elysia's own work per request
 * (its context, hook chain and steps): about a third of the server's CPU per authorization
 * (docs/architecture.md, "Answered in front of Elysia"). The app keeps the route itself, which
 * documents it and answers a request handed to `app.handle` directly; tests hold the two to the
 * same answers.
 */
function authorizeInFront(deps: AuthorizationFrontDeps, app: (request: Request) => Response | Promise<Response>) {
  const validator = TypeCompiler.Compile(AuthorizePaymentBody)
  const bodyLimitBytes = deps.bodyLimitBytes
  return async (request: Request): Promise<Response> => {
    const receivedAt = performance.now()
    const key = secretKeyOf(deps.auth, request)
    if (key === undefined) return app(request)
    const set = { headers: { 'x-request-id': newId('req') } as Record<string, unknown> }
    try {
      const refused = rateLimited(await countRequest(deps.auth, key, request, null, AUTHORIZE_PATH), request, set)
      if (refused !== undefined) return refused
      const body = await parseJsonBody(request, bodyLimitBytes)
      if (!validator.Check(body)) throw toApiError('VALIDATION', new ValidationError('body', validator, body))
      return await answerAuthorization(deps.core, deps.records, key.orgId, body, request, receivedAt, set)
    } catch (error) {
      return failureAnswer('UNKNOWN', error, request, set).response
    }
  }
}

/**
 * The authorization route in front of the app: what a listening server answers
 * `POST /v1/payments/authorize` with (Bun's own router dispatches to it before Elysia's), and what
 * `handle` passes every request through.
 */
export function authorizationFront(deps: AuthorizationFrontDeps, app: (request: Request) => Response | Promise<Response>) {
  const shed = authorizationShed(deps)
  const authorize = authorizeInFront(deps, app)
  const deadlines = deps.core.deadlines
  const front = (request: Request) => {
    // Budgets that ended while this turn of the loop read requests are answered now, not once the
    // turn is over and timers run (see `Deadlines`).
    deadlines.fireDue()
    return shed(request) ?? authorize(request)
  }
  return {
    routes: { [AUTHORIZE_PATH]: { POST: front } },
    handle: (request: Request) => (request.method === 'POST' && pathnameOf(request.url) === AUTHORIZE_PATH ? front(request) : app(request)),
  }
}
