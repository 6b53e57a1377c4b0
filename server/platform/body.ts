import { Elysia } from 'elysia'
import { ApiError } from '../lib/errors.ts'
import { checkIdempotencyKeyHeader, checkUrl, decodeUtf8, parseCheckedJson } from './input.ts'

async function readLimited(request: Request, limitBytes: number): Promise<string> {
  const declared = request.headers.get('content-length')
  if (declared !== null) {
    const declaredBytes = Number(declared)
    if (declaredBytes > limitBytes) throw tooLarge(limitBytes)
    // A body with a Content-Length within the limit is read whole: the HTTP server reads no more
    // than it declares. What arrives is still measured, for a request built in process whose
    // header says less than its body.
    if (Number.isInteger(declaredBytes) && declaredBytes >= 0 && declared.trim() !== '') {
      const bytes = await request.bytes()
      if (bytes.byteLength > limitBytes) throw tooLarge(limitBytes)
      return decodeUtf8(bytes)
    }
  }
  if (request.body === null) return ''
  // No usable Content-Length (a chunked body): counted as it streams, so it cannot get around the limit.
  const reader = request.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > limitBytes) {
      await reader.cancel()
      throw tooLarge(limitBytes)
    }
    chunks.push(value)
  }
  return decodeUtf8(Buffer.concat(chunks))
}

function tooLarge(limitBytes: number): ApiError {
  return new ApiError('invalid_request', `The request body exceeds the limit of ${limitBytes} bytes`, {
    field: 'body',
    statusOverride: 413,
  })
}

/**
 * Bun's own cap on a request body, given to `listen`: only a backstop, far above BODY_LIMIT_BYTES.
 * Bun refuses past it with an empty 413; the body plugin refuses past the limit (from
 * Content-Length before reading, or as a stream arrives) with the error body every refusal has.
 */
export const BUN_BODY_BACKSTOP_BYTES = 1024 * 1024 * 1024

/** The same refusal for a body that cannot be read whole (the connection failed while it came) as for one that is not JSON. */
const UNREADABLE = 'The request body is not valid JSON'

/**
 * The body as JSON (`{}` when empty), or the refusal the body plugin gives it, always thrown as an
 * `ApiError`: too large (413), not UTF-8, nested too deep, not JSON, or holding a string Postgres
 * cannot store or a forbidden key (400, `server/platform/input.ts`).
 */
export async function parseJsonBody(request: Request, limitBytes: number): Promise<unknown> {
  let text: string
  try {
    text = await readLimited(request, limitBytes)
  } catch (error) {
    if (error instanceof ApiError) throw error
    throw new ApiError('invalid_request', UNREADABLE, { field: 'body' })
  }
  if (text.trim() === '') return {}
  const contentType = request.headers.get('content-type') ?? ''
  if (!/^application\/(.+\+)?json\b/i.test(contentType)) {
    throw new ApiError('invalid_request', 'Content-Type must be application/json', { field: 'content-type' })
  }
  try {
    return parseCheckedJson(text)
  } catch (error) {
    if (error instanceof ApiError) throw error
    throw new ApiError('invalid_request', UNREADABLE, { field: 'body' })
  }
}

/**
 * Bodies are JSON, at most `limitBytes` (BODY_LIMIT_BYTES, 256 KiB by default), counted as they
 * stream so a missing Content-Length cannot get around the limit, and checked before any route
 * validates them (`parseJsonBody`).
 */
export function jsonBodyPlugin(limitBytes: number) {
  return new Elysia({ name: 'kassa/json-body' }).onParse({ as: 'global' }, async ({ request }) => {
    if (request.method === 'GET' || request.method === 'HEAD') return
    return await parseJsonBody(request, limitBytes)
  })
}

/**
 * The checks of a request's URL and headers that hold for every route, before any route runs:
 * a path or query parameter Postgres cannot store, and a malformed Idempotency-Key (`input.ts`).
 * Registered behind authentication, so a refused request has been counted against its rate limit.
 */
export function requestShapePlugin() {
  return new Elysia({ name: 'kassa/request-shape' }).onRequest(({ request }) => {
    checkUrl(request.url)
    checkIdempotencyKeyHeader(request)
  })
}
