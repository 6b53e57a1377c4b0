import { Elysia } from 'elysia'
import { newId } from '../../lib/ids.ts'
import type { ClaimService } from './claims.ts'
import { parseSbtId } from './claims.ts'
import type { CredentialService } from './credentials.ts'
import { SBT_ERRORS, SbtError, failure, success } from './envelope.ts'
import type { Rail } from './mint-chain.ts'
import type { SbtReads } from './reads.ts'
import { parsePaging } from './reads.ts'
import type { SbtTokens } from './tokens.ts'
import type { WalletAuth, WalletProof } from './user-auth.ts'

export interface SbtRouteServices {
  tokens: SbtTokens
  reads: SbtReads
  wallets: WalletAuth
  credentials: CredentialService
  claims: ClaimService
  /** Sandbox only: the chain's execute endpoint, which a real deployment's chain provides itself. */
  sandbox: boolean
  openapi: () => unknown
  log: (line: string) => void
}

/** Paths answered without a service token: the API's own description, and the health check. */
const PUBLIC_PATHS = new Set(['/openapi.json', '/health'])

type Body = Record<string, unknown> | undefined

function bodyOf(body: unknown): Body {
  if (body === undefined || body === null || body === '') return undefined
  if (typeof body !== 'object' || Array.isArray(body)) throw new SbtError('invalid_parameter', 'body must be a JSON object')
  return body as Record<string, unknown>
}

function proofOf(body: Body): Partial<WalletProof> {
  return { address: body?.address as string | undefined, nonce: body?.nonce as string | undefined, signature: body?.signature as string | undefined }
}

function statusOf(error: unknown, code: string | number, log: (line: string) => void): { status: number; envelope: ReturnType<typeof failure> } {
  if (error instanceof SbtError) return { status: error.status, envelope: failure(error) }
  if (code === 'NOT_FOUND') {
    const notFound = new SbtError('route_not_found', 'No such endpoint')
    return { status: notFound.status, envelope: failure(notFound) }
  }
  if (code === 'PARSE' || code === 'VALIDATION') {
    const invalid = new SbtError('invalid_parameter', 'body must be a JSON object')
    return { status: invalid.status, envelope: failure(invalid) }
  }
  // The request id is in the answer and in the log line with the stack, so support can find one from the other.
  const requestId = newId('req')
  log(`sbt: unexpected error in request ${requestId}: ${(error as Error)?.stack ?? String(error)}`)
  const internal = new SbtError('internal', `An internal error occurred; quote request ${requestId}`)
  return { status: SBT_ERRORS.internal.status, envelope: failure(internal) }
}

/**
 * The SBT listener's app: the contract's paths exactly as written, each answering the envelope,
 * behind the service token (`Authorization: <token>`, no scheme word). Credential and claim
 * endpoints further carry the end user's wallet proof in the body.
 */
export function sbtListenerApp(services: SbtRouteServices) {
  const claim = (rail: Rail) => async ({ body }: { body: unknown }) => {
    const parsed = bodyOf(body)
    const sbtId = parseSbtId(parsed?.sbtId)
    const user = await services.wallets.signIn(proofOf(parsed))
    return success(await services.claims.claim(rail, user, sbtId))
  }
  let app = new Elysia({ name: 'kassa/sbt' })
    .onError(({ error, code, set }) => {
      const { status, envelope } = statusOf(error, code, services.log)
      set.status = status
      set.headers['content-type'] = 'application/json'
      return envelope
    })
    .onRequest(async ({ request }) => {
      const path = new URL(request.url).pathname
      if (PUBLIC_PATHS.has(path)) return
      await services.tokens.authenticate(request.headers.get('authorization'))
    })
    .get('/health', () => success({ status: 'ok' }))
    .get('/openapi.json', () => services.openapi())
    .get('/gonative/user', async ({ request }) => success(await services.reads.user(new URL(request.url).searchParams.get('address'))))
    .get('/gonative/all-users', async ({ request }) => {
      const query = new URL(request.url).searchParams
      const { page, pageSize } = parsePaging(query.get('page'), query.get('pageSize'))
      return success(await services.reads.allUsers(page, pageSize))
    })
    .post('/auth/challenge', async ({ body }) => {
      const parsed = bodyOf(body)
      return success(await services.wallets.challenge(parsed?.address, parsed?.inviteCode))
    })
    .post('/campaignNew/credential/:id/verify', async ({ params, body }) => {
      const user = await services.wallets.signIn(proofOf(bodyOf(body)))
      return success(await services.credentials.verify(params.id, user))
    })
    .post('/campaignNew/credential/:id/click', async ({ params, body }) => {
      const user = await services.wallets.signIn(proofOf(bodyOf(body)))
      return success(await services.credentials.click(params.id, user))
    })
    .post('/sui/sbt/claim', claim('sui'))
    .post('/evm-sbt/sbt/claim', claim('evm'))
    .post('/sui/sbt/claim/check', async ({ body }) => {
      const parsed = bodyOf(body)
      const sbtId = parseSbtId(parsed?.sbtId)
      const user = await services.wallets.signIn(proofOf(parsed))
      return success(await services.claims.check(user, sbtId))
    })
  if (services.sandbox) {
    app = app.post('/sandbox/chain/execute', async ({ body }) => {
      const parsed = bodyOf(body)
      return success(await services.claims.executeOnSandbox(parsed?.txBytes, parsed?.userSignature, parsed?.sponsorSignature))
    }) as unknown as typeof app
  }
  return app
}
