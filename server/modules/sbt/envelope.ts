/**
 * The SBT data API answers every request with the envelope `{code, message, data}`: `code` 0 on
 * success, a non-zero code from this table on failure, with the HTTP status the table gives it.
 * The codes are five digits: the HTTP status, then a two-digit case, so a client can branch on
 * either. One table, applied in one place (the listener's error handler).
 */
export const SBT_ERRORS = {
  invalid_parameter: { code: 40001, status: 400, meaning: 'A parameter or body field is missing or malformed; the message names it' },
  invalid_address: { code: 40002, status: 400, meaning: 'The Sui address is not 0x followed by 64 hex digits' },
  page_out_of_range: { code: 40003, status: 400, meaning: 'page is below 1 or pageSize outside 5 to 20 (never clamped)' },
  missing_token: { code: 40101, status: 401, meaning: 'No Authorization header' },
  invalid_token: { code: 40102, status: 401, meaning: 'The token is unknown or revoked' },
  wrong_environment: { code: 40103, status: 401, meaning: 'The token belongs to the other environment (staging and production are never interchangeable)' },
  invalid_signature: { code: 40104, status: 401, meaning: 'The wallet signature does not verify for the address and challenge' },
  challenge_expired: { code: 40105, status: 401, meaning: 'The challenge is unknown, used already, or expired; ask for a new one' },
  user_not_found: { code: 40401, status: 404, meaning: 'No user with this address' },
  credential_not_found: { code: 40402, status: 404, meaning: 'No credential with this id' },
  reward_not_found: { code: 40403, status: 404, meaning: 'No SBT reward with this sbtId' },
  claim_not_found: { code: 40404, status: 404, meaning: 'No claim in progress for this user and SBT' },
  route_not_found: { code: 40405, status: 404, meaning: 'No such endpoint' },
  already_claimed: { code: 40901, status: 409, meaning: 'The user holds this SBT already (claimType 4); a second mint is never built' },
  claim_in_progress: { code: 40902, status: 409, meaning: 'A mint for this SBT is in flight (claimType 3); confirm it with /sui/sbt/claim/check' },
  not_eligible: { code: 42201, status: 422, meaning: 'Not every credential of the reward\'s group has a stored result with status 1' },
  unsupported_label_type: { code: 42202, status: 422, meaning: 'The credential\'s labelType has no verifier here (undefined, or a platform check this deployment cannot run)' },
  wallet_not_bound: { code: 42203, status: 422, meaning: 'The EVM rail needs an EVM wallet the user has not bound' },
  verify_api_unavailable: { code: 50201, status: 502, meaning: 'The issuer\'s Verify API did not answer in time, or answered with an error' },
  chain_unavailable: { code: 50301, status: 503, meaning: 'No mint chain is configured on this deployment (production needs a chain adapter; the sandbox chain serves staging)' },
  internal: { code: 50001, status: 500, meaning: 'An unexpected error; quote the request id' },
} as const

export type SbtErrorName = keyof typeof SBT_ERRORS

/** The one class for expected failures on the SBT listener. */
export class SbtError extends Error {
  override name = 'SbtError'
  constructor(
    readonly kind: SbtErrorName,
    message: string,
  ) {
    super(message)
  }
  get code(): number {
    return SBT_ERRORS[this.kind].code
  }
  get status(): number {
    return SBT_ERRORS[this.kind].status
  }
}

export interface Envelope<T> {
  code: number
  message: string
  data: T
}

export function success<T>(data: T): Envelope<T> {
  return { code: 0, message: 'success', data }
}

export function failure(error: SbtError): Envelope<null> {
  return { code: error.code, message: error.message, data: null }
}

export function invalidParameter(name: string, message: string): SbtError {
  return new SbtError('invalid_parameter', `${name}: ${message}`)
}
