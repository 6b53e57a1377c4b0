import { Elysia, t } from 'elysia'
import { AssertionError } from '../lib/assert.ts'
import { ApiError, ERROR_STATUS, type ErrorCode } from '../lib/errors.ts'
import { newId } from '../lib/ids.ts'
import { requestSlot } from './request-slot.ts'

/** The one error body, everywhere. */
export const ErrorBody = t.Object(
  {
    error: t.Object({
      code: t.Union(
        (Object.keys(ERROR_STATUS) as ErrorCode[]).map((code) => t.Literal(code)),
        { description: 'Stable machine-readable code from the contract' },
      ),
      message: t.String({ description: 'Human-readable explanation; may change, do not parse it' }),
      field: t.Optional(t.String({ description: 'The request field at fault, as a dotted path' })),
      requestId: t.String({ description: 'Also sent as the X-Request-Id header; quote it to support' }),
    }),
  },
  { title: 'Error' },
)

export interface ErrorBodyValue {
  error: { code: ErrorCode; message: string; field?: string; requestId: string }
}

const requestIds = requestSlot<string>('kassa.requestId')

export function requestIdOf(request: Request): string {
  let id = requestIds.get(request)
  if (id === undefined) {
    id = newId('req')
    requestIds.set(request, id)
  }
  return id
}

/** Turns `/metadata/tier` (TypeBox's pointer) into `metadata.tier`. */
function fieldFromPointer(pointer: string | undefined): string | undefined {
  if (pointer === undefined || pointer === '' || pointer === '/') return undefined
  return pointer.replace(/^\//, '').replaceAll('/', '.')
}

interface ValidationIssue {
  path?: string
  message?: string
  summary?: string
  schema?: { error?: string; anyOf?: Array<{ const?: unknown }> }
}

/** For a choice among literals, names the choices; Elysia's own summary names only their types. */
function describeChoice(issue: ValidationIssue | undefined, field: string): string | undefined {
  const choices = issue?.schema?.anyOf
  if (!Array.isArray(choices) || choices.length === 0 || !choices.every((choice) => choice.const !== undefined)) return undefined
  return `${field} must be one of: ${choices.map((choice) => String(choice.const)).join(', ')}`
}

function fromValidationError(error: unknown, on: string): ApiError {
  const issues: ValidationIssue[] = ((error as { all?: ValidationIssue[] }).all ?? []) as ValidationIssue[]
  const first = issues[0]
  const pointerField = fieldFromPointer(first?.path)
  const field = pointerField ?? (on === 'body' ? 'body' : on)
  const explained = first?.schema?.error ?? describeChoice(first, field)
  let message = explained ?? first?.summary ?? first?.message ?? 'Invalid request'
  if (first?.message === 'Unexpected property') message = `Unknown field '${field}'`
  else if (on === 'query' && pointerField) message = `Query parameter '${pointerField}': ${explained ?? first?.message ?? 'invalid'}`
  return new ApiError('invalid_request', message, { field })
}

export function toApiError(code: string | number, error: unknown): ApiError {
  if (error instanceof ApiError) return error
  switch (code) {
    case 'VALIDATION': {
      const on = (error as { type?: string }).type ?? 'body'
      // A response that fails its own schema is the server's fault, never the caller's request.
      if (on === 'response') return new ApiError('internal', 'An internal error occurred; quote the request id to support')
      return fromValidationError(error, on)
    }
    case 'PARSE': {
      // Elysia wraps whatever a parse hook throws in its own ParseError; the body plugin's own
      // refusals (413 for an oversized body, a wrong Content-Type) travel as its cause.
      const cause = (error as { cause?: unknown }).cause
      if (cause instanceof ApiError) return cause
      return new ApiError('invalid_request', 'The request body is not valid JSON', { field: 'body' })
    }
    case 'NOT_FOUND':
      return new ApiError('not_found', 'No such route')
    case 'INVALID_COOKIE_SIGNATURE':
      return new ApiError('invalid_request', 'Invalid cookie')
    default:
      return new ApiError('internal', 'An internal error occurred; quote the request id to support')
  }
}

export function errorResponse(error: ApiError, requestId: string, headers: Record<string, string | number> = {}): Response {
  const body: ErrorBodyValue = { error: { code: error.code, message: error.message, requestId } }
  if (error.field !== undefined) body.error.field = error.field
  // Header names are lower case throughout (Elysia's `set.headers`, `ApiError.headers`), so a plain
  // object gives the same headers as a `Headers` built by `set`, the later value winning.
  const responseHeaders: Record<string, string> = {}
  for (const name in headers) responseHeaders[name] = String(headers[name])
  if (error.headers !== undefined) for (const name in error.headers) responseHeaders[name] = error.headers[name]!
  responseHeaders['content-type'] = 'application/json'
  responseHeaders['x-request-id'] = requestId
  return new Response(JSON.stringify(body), { status: error.status, headers: responseHeaders })
}

/** The request's id: the one the errors plugin's request hook put in `set`, else one kept for the request. */
function requestIdIn(request: Request, set: { headers: Record<string, unknown> }): string {
  const given = set.headers['x-request-id']
  return typeof given === 'string' ? given : requestIdOf(request)
}

/**
 * An error's answer, with the headers `set` holds (request id, rate headers), which is emptied so
 * Elysia does not merge them into the answer a second time. The errors plugin answers every thrown
 * error so; request hooks that refuse in volume (a shed authorization, a rate limit) call it
 * themselves instead of throwing, which spares the error's stack trace and the plugin's error hook
 * (its listener saves idempotent answers, and such a refusal never holds a claim).
 */
export function errorAnswer(error: ApiError, request: Request, set: { headers: Record<string, unknown> }, requestId = requestIdIn(request, set)): Response {
  const response = errorResponse(error, requestId, set.headers as Record<string, string | number>)
  set.headers = {}
  return response
}

/**
 * A thrown failure's answer (Elysia's error `code`, or any for an error thrown outside Elysia): the
 * contract's error body, and for anything unexpected a line with its stack on the server and only
 * `internal` with the request id to the client.
 */
export function failureAnswer(code: string | number, error: unknown, request: Request, set: { headers: Record<string, unknown> }): { apiError: ApiError; response: Response } {
  const apiError = toApiError(code, error)
  const requestId = requestIdIn(request, set)
  if (apiError.code === 'internal') {
    const kind = error instanceof AssertionError ? 'assertion failed' : 'unexpected error'
    console.error(`[${requestId}] ${kind}:`, error)
  }
  return { apiError, response: errorAnswer(apiError, request, set, requestId) }
}

export type ErrorListener = (request: Request, error: ApiError, response: Response) => Promise<void> | void

/**
 * Request ids and the mapping of every failure to the one error body. Unexpected errors are
 * logged with their stack on the server and reach the client only as `internal` with a request id.
 */
export function errorsPlugin(options: { onErrorResponse?: ErrorListener } = {}) {
  return new Elysia({ name: 'kassa/errors' })
    // The request's id travels in its own response headers, where the error hook finds it again,
    // rather than in a map keyed by the request.
    .onRequest(({ set }) => {
      set.headers['x-request-id'] = newId('req')
    })
    .onError({ as: 'global' }, async ({ code, error, request, set }) => {
      const { apiError, response } = failureAnswer(code, error, request, set as { headers: Record<string, unknown> })
      await options.onErrorResponse?.(request, apiError, response)
      return response
    })
}
