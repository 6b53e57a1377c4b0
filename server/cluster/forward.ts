import { timingSafeEqual } from 'node:crypto'
import { sha256 } from '@noble/hashes/sha2.js'
import { ApiError } from '../lib/errors.ts'
import { newId } from '../lib/ids.ts'
import { pathnameOf } from '../lib/url.ts'
import { errorResponse } from '../platform/errors.ts'
import type { KeyCache } from '../platform/key-cache.ts'
import { presentedKey } from '../platform/auth.ts'
import type { Leases } from './leases.ts'
import { partitionOf } from './partitions.ts'

/** The header a forwarded request carries the cluster's secret in; the internal listener refuses a request without it. */
export const SECRET_HEADER = 'x-kassa-cluster-secret'
/** Which server forwarded a request (for the owner's logs; never trusted for anything). */
export const FORWARDED_BY_HEADER = 'x-kassa-forwarded-by'

/**
 * How long a forwarder waits for the owner's answer. An authorization's budget is 500 ms counted
 * at the owner; a little more here, so that its own `processing_timeout` answer gets through. Any
 * other request: 10 s, so that a stopped owner is not waited for without end.
 */
const AUTHORIZE_FORWARD_TIMEOUT_MS = 1_000
const FORWARD_TIMEOUT_MS = 10_000
/** Hop-by-hop headers (RFC 9110 §7.6.1) and those the relay recomputes: not passed on. */
const NOT_RELAYED = ['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'content-encoding', 'host', 'upgrade', 'te', 'trailer']

export interface GateDependencies {
  leases: Leases
  instanceId: string
  partitionCount: number
  secret: string
  /** The key cache, once the server has one (requests before that are refused 503). */
  keys(): KeyCache | undefined
  wallNowMs(): number
  /**
   * The organization an operator write acts on, when it changes what an owner holds in memory (a
   * withdrawal approved or rejected, a suspense arrival credited to an account, an account frozen,
   * anything under `/ops/v1/orgs/{orgId}/`), or undefined: answered here (see `operatorWriteOrg`).
   */
  operatorOrgOf(request: Request, path: string): Promise<string | undefined> | string | undefined
}

/** The header that marks a request a server makes of itself (see `internalRequests`). */
export const INTERNAL_HEADER = 'x-kassa-internal'

/**
 * Requests a server makes of itself for work that belongs to an organization's owner (a cycle's
 * part, for one): sent through `handle`, the gate answers them here or forwards them to the owner,
 * which receives them with the cluster's secret. A route for such work answers a request that is
 * `authorized`: marked by this process, or carrying the secret; any other caller is refused.
 */
export function internalRequests(secret: string, handle: () => (request: Request) => Response | Promise<Response>) {
  const mark = crypto.randomUUID()
  return {
    authorized: (request: Request) => request.headers.get(INTERNAL_HEADER) === mark || secretMatches(request.headers.get(SECRET_HEADER), secret),
    /** POSTs `path` with these headers through the whole server (gate first); answers the response. */
    post: (path: string, headers: Record<string, string>) =>
      handle()(new Request(`http://kassa.internal${path}`, { method: 'POST', headers: { ...headers, [INTERNAL_HEADER]: mark } })),
  }
}

/** Whether `presented` is the cluster's secret, compared in constant time. */
export function secretMatches(presented: string | null, secret: string): boolean {
  if (presented === null) return false
  return timingSafeEqual(sha256(new TextEncoder().encode(presented)), sha256(new TextEncoder().encode(secret)))
}

/**
 * Decides where a request is answered, in front of everything else (docs/scale-out.md, "Cluster
 * mode"). Partner requests (`/v1/…` with an API key that authenticates) belong to the key's
 * organization: answered here when this server serves its partition, forwarded to the owner's
 * internal listener when another server holds it, and refused 503 `partner_unavailable` with
 * `Retry-After` while nobody serves it (an owner that died and whose lease has not lapsed, a
 * partition being handed over); never decided here on memory that is not the owner's. A request
 * that arrives forwarded (it carries the secret) is answered here or refused, never forwarded on.
 * Operator writes that act on one organization's money or accounts go to its owner the same way
 * (their operator token goes with them and is checked there). Everything else (operator reads and
 * organization-free writes, public reads, keys that do not authenticate) is answered here:
 * undefined means "go on to the app".
 */
export type Gate = (request: Request) => Response | Promise<Response | undefined> | undefined

export function clusterGate(deps: GateDependencies): Gate {
  const partitions = new Map<string, number>()
  const partitionOfOrg = (orgId: string) => {
    let partition = partitions.get(orgId)
    if (partition === undefined) {
      partition = partitionOf(orgId, deps.partitionCount)
      partitions.set(orgId, partition)
    }
    return partition
  }
  const routeOperatorWrite = async (request: Request, path: string): Promise<Response | undefined> => {
    const orgId = await deps.operatorOrgOf(request, path)
    if (orgId === undefined) return undefined
    const secretHeader = request.headers.get(SECRET_HEADER)
    return route(request, orgId, secretHeader !== null && secretMatches(secretHeader, deps.secret))
  }
  const route = (request: Request, orgId: string, forwarded: boolean): Response | Promise<Response> | undefined => {
    const partition = partitionOfOrg(orgId)
    if (deps.leases.serves(partition)) return undefined
    if (deps.leases.epochOf(partition) !== undefined) deps.leases.beatSoon()
    const holder = deps.leases.holderOf(partition)
    if (forwarded || holder === undefined || !holder.live || holder.address === null || holder.holder === deps.instanceId) {
      return unavailable('no server of the cluster serves this organization right now (its owner is changing)')
    }
    return forward(request, holder.address, deps)
  }
  return (request) => {
    const path = pathnameOf(request.url)
    if (path.startsWith('/ops/v1/') && request.method !== 'GET' && request.method !== 'HEAD') return routeOperatorWrite(request, path)
    if (!path.startsWith('/v1/')) return undefined
    const secretHeader = request.headers.get(SECRET_HEADER)
    const forwarded = secretHeader !== null && secretMatches(secretHeader, deps.secret)
    let presented: string | undefined
    try {
      presented = presentedKey(request)
    } catch {
      return undefined
    }
    if (presented === undefined) return undefined
    const keys = deps.keys()
    if (keys === undefined) return unavailable('this server is starting')
    const found = keys.lookup(presented, deps.wallNowMs())
    if (found.ok) return route(request, found.key.orgId, forwarded)
    if (found.reason !== 'unknown') return undefined
    // A key issued on another server a moment ago: read once, as the app would.
    return keys.lookupReadingMisses(presented, deps.wallNowMs()).then((result) => (result.ok ? route(request, result.key.orgId, forwarded) : undefined))
  }
}

function unavailable(reason: string): Response {
  return errorResponse(new ApiError('partner_unavailable', `${reason}; nothing was done; retry`, { headers: { 'retry-after': '1' } }), newId('req'))
}

/**
 * Sends the request to the owner's internal listener with the cluster's secret over a kept-alive
 * connection (Bun's fetch pools them), and relays its answer as it came: status, headers (but the
 * hop-by-hop ones) and body. An owner that does not answer gives 503 `partner_unavailable`: the
 * request may have been applied there, so a retry should carry the same `Idempotency-Key`.
 */
async function forward(request: Request, address: string, deps: GateDependencies): Promise<Response> {
  const url = request.url
  const pathStart = url.indexOf('/', url.indexOf('://') + 3)
  const target = `http://${address}${pathStart === -1 ? '/' : url.slice(pathStart)}`
  const headers = new Headers(request.headers)
  for (const name of NOT_RELAYED) headers.delete(name)
  headers.set(SECRET_HEADER, deps.secret)
  headers.set(FORWARDED_BY_HEADER, deps.instanceId)
  const body = request.method === 'GET' || request.method === 'HEAD' ? undefined : await request.arrayBuffer()
  const timeoutMs = pathnameOf(url) === '/v1/payments/authorize' ? AUTHORIZE_FORWARD_TIMEOUT_MS : FORWARD_TIMEOUT_MS
  let upstream: Response
  try {
    upstream = await fetch(target, { method: request.method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(timeoutMs) })
  } catch (error) {
    return errorResponse(
      new ApiError('partner_unavailable', `the server that owns this organization did not answer (${(error as Error).name}); the request may or may not have been applied: retry it with the same Idempotency-Key`, {
        headers: { 'retry-after': '1' },
      }),
      newId('req'),
    )
  }
  const relayed = new Headers(upstream.headers)
  for (const name of NOT_RELAYED) relayed.delete(name)
  return new Response(await upstream.arrayBuffer(), { status: upstream.status, statusText: upstream.statusText, headers: relayed })
}

/** What an operator write names that leads to its organization (see `GateDependencies.operatorOrgOf`). */
export type OperatorWriteTarget = { orgId: string } | { withdrawalId: string } | { accountId: string } | { suspenseAssign: true } | undefined

/**
 * Which operator writes an owner must answer, read from the path alone: everything under
 * `/ops/v1/orgs/{orgId}/`, a withdrawal's approval or rejection, an account's freeze or unfreeze,
 * a suspense arrival's assignment to an account (named in its body), and one organization's part of
 * a cycle's settlement. The rest (organizations created, vaults and cycles as a whole, which are
 * platform-wide, a suspense arrival sent back on chain) has no owner among the organizations and is
 * answered where it arrives.
 */
export function operatorWriteTarget(path: string): OperatorWriteTarget {
  const parts = path.split('/')
  // ['', 'ops', 'v1', resource, id, action?]
  const [, , , resource, id, action] = parts
  if (id === undefined || id === '') return undefined
  if (resource === 'orgs' && parts.length > 5) return { orgId: id }
  if (resource === 'withdrawals' && (action === 'approve' || action === 'reject')) return { withdrawalId: id }
  if (resource === 'accounts' && (action === 'freeze' || action === 'unfreeze')) return { accountId: id }
  if (resource === 'suspense' && action === 'assign') return { suspenseAssign: true }
  // One organization's part of a cycle's settlement or roll back (server/modules/earning/cycles.ts).
  if (resource === 'vault-cycles' && action === 'parts' && parts[6]) return { orgId: parts[6] }
  return undefined
}
