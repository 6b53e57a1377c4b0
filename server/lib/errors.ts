/**
 * Every error code of the contract, with the HTTP status it answers with. One table, applied in one
 * place (the errors plugin); nothing else picks a status for an expected failure.
 */
export const ERROR_STATUS = {
  invalid_request: 400,
  authentication_error: 401,
  unauthorized: 401,
  permission_denied: 403,
  not_found: 404,
  conflict: 409,
  idempotency_conflict: 409,
  idempotency_in_progress: 409,
  hold_not_active: 409,
  quote_consumed: 409,
  insufficient_available: 422,
  min_amount: 422,
  limit_exceeded: 422,
  hold_expired: 422,
  quote_expired: 422,
  account_frozen: 422,
  screening_rejected: 422,
  unsupported_asset: 422,
  stale_price: 422,
  rate_limited: 429,
  internal: 500,
  partner_unavailable: 503,
} as const

export type ErrorCode = keyof typeof ERROR_STATUS

export interface ApiErrorOptions {
  /** The request field at fault, as a dotted path (`amount`, `metadata.tier`). */
  field?: string
  headers?: Record<string, string>
  /**
   * Only for transport-level refusals whose HTTP status carries meaning to proxies and clients
   * (413 for an oversized body); business rules always answer the table's status.
   */
  statusOverride?: 413
}

/** The one class for expected failures. Its `code` is from the contract's list. */
export class ApiError extends Error {
  override name = 'ApiError'
  readonly code: ErrorCode
  readonly field: string | undefined
  readonly headers: Record<string, string> | undefined
  private readonly statusOverride: number | undefined

  constructor(code: ErrorCode, message: string, options: ApiErrorOptions = {}) {
    super(message)
    this.code = code
    this.field = options.field
    this.headers = options.headers
    this.statusOverride = options.statusOverride
  }

  get status(): number {
    return this.statusOverride ?? ERROR_STATUS[this.code]
  }
}

export function invalid(field: string, message: string): ApiError {
  return new ApiError('invalid_request', message, { field })
}

export function notFound(what: string): ApiError {
  return new ApiError('not_found', `No such ${what}`)
}
