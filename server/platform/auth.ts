import { Elysia } from 'elysia'
import { ApiError } from '../lib/errors.ts'
import { errorAnswer } from './errors.ts'
import { requestSlot } from './request-slot.ts'
import { timingSafeEqualStrings } from '../lib/hash.ts'
import { pathnameOf } from '../lib/url.ts'
import { ANONYMOUS_RATE_LIMIT, DEFAULT_KEY_RATE_LIMIT, PUBLISHABLE_KEY_RATE_LIMIT, type CachedKey, type KeyCache, type KeyType } from './key-cache.ts'
import type { RateDecision, RateLimiter } from './rate-limit-store.ts'

/** Who is calling: an organization through one of its keys, or nobody (a public read). */
export interface Principal {
  orgId: string
  keyId: string
  keyType: KeyType
}

/**
 * What a route needs. `public`: no key needed (a key, when sent, still counts and is checked);
 * `publishable`: any key of the organization (catalogs, prices, building transactions);
 * `secret`: a secret key, or a test key on sandbox.
 */
export type Access = 'public' | 'publishable' | 'secret'

const principals = requestSlot<Principal>('kassa.principal')

export function principalOf(request: Request): Principal | undefined {
  return principals.get(request)
}

/** The key a request presents, from `Authorization: Bearer` or `x-api-key`; undefined when none. */
export function presentedKey(request: Request): string | undefined {
  const authorization = request.headers.get('authorization')
  if (authorization !== null) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
    if (!match) throw new ApiError('authentication_error', 'Authorization header must be "Bearer <API key>"')
    return match[1]
  }
  const apiKey = request.headers.get('x-api-key')
  if (apiKey !== null) return apiKey.trim()
  return undefined
}

/** What authentication reads: the key cache, the wall clock, the rate limiter and the operator token. */
export interface AuthDependencies {
  keys: KeyCache
  clock: { wallNowMs(): number }
  rateLimiter: RateLimiter
  operatorToken: string
}

const FAILURE_MESSAGES = {
  unknown: 'Invalid API key',
  revoked: 'This API key has been revoked',
  expired: 'This API key has expired after rotation',
  wrong_environment: 'This API key belongs to the other environment',
} as const

function authenticate(auth: AuthDependencies, request: Request): CachedKey | undefined {
  const presented = presentedKey(request)
  if (presented === undefined) return undefined
  const result = auth.keys.lookup(presented, auth.clock.wallNowMs())
  if (!result.ok) throw new ApiError('authentication_error', FAILURE_MESSAGES[result.reason])
  return result.key
}

/**
 * The key a request presents when it authenticates now and is not a publishable key (so a route
 * needing a secret key would admit it); undefined for anything else, and never a refusal: for code
 * in front of the app that acts only on such requests and leaves every other to the app, which
 * refuses it as ever (401, 403).
 */
export function secretKeyOf(auth: AuthDependencies, request: Request): CachedKey | undefined {
  let key: CachedKey | undefined
  try {
    key = authenticate(auth, request)
  } catch (error) {
    if (error instanceof ApiError) return undefined
    throw error
  }
  return key?.type === 'publishable' ? undefined : key
}

function limitFor(auth: AuthDependencies, key: CachedKey | undefined): number {
  if (key === undefined) return ANONYMOUS_RATE_LIMIT
  if (key.type === 'publishable') return PUBLISHABLE_KEY_RATE_LIMIT
  return auth.keys.org(key.orgId)?.rateLimitPerMinute ?? DEFAULT_KEY_RATE_LIMIT
}

/**
 * Routes that promise an answer within a budget, and how long they wait at most for a shared
 * rate counter before counting in this instance (see `FailOpenRateLimiter`). An authorization has
 * 500 ms in all; this leaves it the rest for its decision and commit.
 */
const RATE_COUNTER_WAIT_MS: Partial<Record<string, number>> = { '/v1/payments/authorize': 150 }

function sourceAddress(request: Request, server: { requestIP(request: Request): { address: string } | null } | null): string {
  return server?.requestIP(request)?.address ?? 'unknown'
}

/**
 * Counts one request against its bucket: its key's, or its source address's when it presents no key
 * that authenticates (so guessing keys is held to the anonymous limit instead of being free).
 */
export function countRequest(
  auth: AuthDependencies,
  key: CachedKey | undefined,
  request: Request,
  server: { requestIP(request: Request): { address: string } | null } | null,
  path: string,
): Promise<RateDecision> {
  const bucket = key ? `key:${key.id}` : `ip:${sourceAddress(request, server)}`
  return auth.rateLimiter.hit(bucket, limitFor(auth, key), auth.clock.wallNowMs(), { waitMs: RATE_COUNTER_WAIT_MS[path] })
}

/**
 * Puts a counted request's rate headers on `set`, and answers its refusal when it is past its
 * limit: answered rather than thrown, since a caller past its limit may send thousands of these,
 * and each should cost as little as a refusal can (README, "API decisions where the contract is silent").
 */
export function rateLimited(decision: RateDecision, request: Request, set: { headers: Record<string, unknown> }): Response | undefined {
  set.headers['x-ratelimit-limit'] = String(decision.limit)
  set.headers['x-ratelimit-remaining'] = String(decision.remaining)
  if (decision.allowed) return undefined
  const refusal = new ApiError('rate_limited', `Rate limit of ${decision.limit} requests per minute exceeded`, {
    headers: { 'retry-after': String(decision.retryAfterSeconds) },
  })
  return errorAnswer(refusal, request, set)
}

/**
 * Authentication and rate limiting for `/v1`, before anything else looks at the request: a bad
 * key is 401 whatever the body, and every request (even one that ends in 404 or 401) is counted
 * and carries the rate headers. A request whose key fails is counted per source IP like one
 * without a key. (An authorization presenting a key that authenticates is answered in front of
 * the app, which counts it the same way: `server/modules/payments/front.ts`.)
 */
export function apiKeyAuthPlugin(auth: AuthDependencies) {
  return new Elysia({ name: 'kassa/api-key-auth' }).onRequest(async ({ request, set, server }) => {
    const path = pathnameOf(request.url)
    if (!path.startsWith('/v1/') && path !== '/v1') return
    let key: CachedKey | undefined
    let authenticationFailure: ApiError | undefined
    try {
      key = authenticate(auth, request)
    } catch (error) {
      if (!(error instanceof ApiError)) throw error
      authenticationFailure = error
    }
    const refused = rateLimited(await countRequest(auth, key, request, server, path), request, set)
    if (refused !== undefined) return refused
    if (authenticationFailure?.message === FAILURE_MESSAGES.unknown) {
      // Counted against its source above: a key unknown here is read from the database (once; see
      // `lookupReadingMisses`), so a key issued on another instance works here before its notice comes.
      const result = await auth.keys.lookupReadingMisses(presentedKey(request)!, auth.clock.wallNowMs())
      if (!result.ok) throw new ApiError('authentication_error', FAILURE_MESSAGES[result.reason])
      key = result.key
      authenticationFailure = undefined
    }
    if (authenticationFailure) throw authenticationFailure
    if (key) principals.set(request, { orgId: key.orgId, keyId: key.id, keyType: key.type })
  })
}

/** Checks a route's access level against the caller; answers the principal for org-scoped routes. */
export function requireAccess(request: Request, access: Access): Principal | undefined {
  const principal = principalOf(request)
  if (access === 'public') return principal
  if (principal === undefined) {
    throw new ApiError('authentication_error', 'An API key is required: send "Authorization: Bearer <API key>"')
  }
  if (access === 'secret' && principal.keyType === 'publishable') {
    throw new ApiError('permission_denied', 'This endpoint needs a secret key (or a test key on sandbox)')
  }
  return principal
}

/**
 * Failed operator authentications allowed per source address and minute, as for requests without
 * a working API key. Past it, every operator request from that source (the right token included,
 * or guessing would go on and only the right guess would tell) is refused 429 with Retry-After
 * until the window ends.
 */
export const OPERATOR_FAILURE_LIMIT = ANONYMOUS_RATE_LIMIT

/**
 * Operators authenticate with the operator token as a Bearer token, compared in constant time.
 * Failures are counted per source address (`OPERATOR_FAILURE_LIMIT`); a source past its limit is
 * remembered in this instance until its window ends, so its requests cost no count meanwhile.
 */
export function operatorAuthPlugin(auth: AuthDependencies) {
  const blockedUntil = new Map<string, number>()
  return new Elysia({ name: 'kassa/operator-auth' }).onRequest(async ({ request, set, server }) => {
    const path = pathnameOf(request.url)
    if (!path.startsWith('/ops/')) return
    const source = sourceAddress(request, server)
    const nowMs = auth.clock.wallNowMs()
    const until = blockedUntil.get(source)
    if (until !== undefined) {
      if (until > nowMs) return operatorRefusal(OPERATOR_FAILURE_LIMIT, Math.ceil((until - nowMs) / 1000), request, set)
      blockedUntil.delete(source)
    }
    const authorization = request.headers.get('authorization') ?? ''
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
    if (match && timingSafeEqualStrings(match[1]!, auth.operatorToken)) return
    const decision = await auth.rateLimiter.hit(`ops-auth:${source}`, OPERATOR_FAILURE_LIMIT, nowMs)
    if (!decision.allowed) {
      // Entries end with their window; a flood of sources cannot grow the map past the ones blocked this minute.
      if (blockedUntil.size > 100_000) for (const [blocked, end] of blockedUntil) if (end <= nowMs) blockedUntil.delete(blocked)
      blockedUntil.set(source, nowMs + decision.retryAfterSeconds * 1000)
      return operatorRefusal(decision.limit, decision.retryAfterSeconds, request, set)
    }
    throw new ApiError('authentication_error', 'Operator token required: send "Authorization: Bearer <OPERATOR_TOKEN>"')
  })
}

function operatorRefusal(limit: number, retryAfterSeconds: number, request: Request, set: { headers: Record<string, unknown> }): Response {
  const refusal = new ApiError('rate_limited', `Too many failed operator authentications from this source: at most ${limit} a minute`, {
    headers: { 'retry-after': String(Math.max(1, retryAfterSeconds)) },
  })
  return errorAnswer(refusal, request, set)
}
