/**
 * Verification of Kassa webhook deliveries, for receivers. Standalone on purpose: it imports nothing
 * from the server, so a partner can copy this one file (or import `kassa/webhooks/verify`).
 *
 *   const event = verifyWebhook(rawBody, request.headers.get('x-service-signature'), [secret])
 *
 * The header is `t=<unix seconds>,v1=<hex>[,v1=<hex>]`; each `v1` is the hex HMAC-SHA256, keyed with
 * the whole endpoint secret (`whsec_…`) as UTF-8 bytes, of `<t>.<rawBody>`. During the 24 h after a
 * rotation the header carries two `v1` entries (new secret first); one match is enough. Verify the raw
 * body exactly as received: parsing and re-serializing JSON changes the bytes.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'

export const SIGNATURE_HEADER = 'X-Service-Signature'
export const DEFAULT_TOLERANCE_SECONDS = 300

export class WebhookVerificationError extends Error {
  override name = 'WebhookVerificationError'
}

export interface VerifyOptions {
  /** Largest accepted difference between now and `t`, either way; 300 s unless given. */
  toleranceSeconds?: number
  /** Now, in Unix seconds; the system clock unless given. */
  nowSeconds?: number
}

/** The hex signature of one payload at one timestamp with one secret. */
export function computeSignature(rawBody: string | Uint8Array, timestamp: number, secret: string): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(`${timestamp}.`)
    .update(typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody)
    .digest('hex')
}

function parseHeader(header: string): { timestamp: number; signatures: string[] } {
  let timestamp: number | undefined
  const signatures: string[] = []
  for (const part of header.split(',')) {
    const separator = part.indexOf('=')
    if (separator < 0) continue
    const name = part.slice(0, separator).trim()
    const value = part.slice(separator + 1).trim()
    if (name === 't' && /^\d{1,12}$/.test(value)) timestamp = Number(value)
    else if (name === 'v1' && /^[0-9a-f]{64}$/i.test(value)) signatures.push(value.toLowerCase())
  }
  if (timestamp === undefined) throw new WebhookVerificationError('signature header has no timestamp')
  if (signatures.length === 0) throw new WebhookVerificationError('signature header has no v1 signature')
  return { timestamp, signatures }
}

/**
 * Checks a delivery's signature and timestamp and answers the parsed event. Throws
 * `WebhookVerificationError` when the header is missing or malformed, no secret matches any `v1`
 * entry (compared in constant time), or `t` is more than the tolerance in the past or the future.
 */
export function verifyWebhook<Event = { id: string; type: string; created: string; data: Record<string, unknown> }>(
  rawBody: string | Uint8Array,
  header: string | null | undefined,
  secrets: string | readonly string[],
  options: VerifyOptions = {},
): Event {
  if (header === null || header === undefined || header === '') throw new WebhookVerificationError(`missing ${SIGNATURE_HEADER} header`)
  const candidates = typeof secrets === 'string' ? [secrets] : secrets
  if (candidates.length === 0) throw new WebhookVerificationError('no secret to verify with')
  const { timestamp, signatures } = parseHeader(header)
  let matched = false
  for (const secret of candidates) {
    const expected = Buffer.from(computeSignature(rawBody, timestamp, secret), 'utf8')
    // Every pair is compared, so the time taken does not tell which entry or secret matched.
    for (const signature of signatures) {
      const given = Buffer.from(signature, 'utf8')
      if (given.length === expected.length && timingSafeEqual(given, expected)) matched = true
    }
  }
  if (!matched) throw new WebhookVerificationError('no signature matches the payload')
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS
  const now = options.nowSeconds ?? Math.floor(Date.now() / 1000)
  if (Math.abs(now - timestamp) > tolerance) throw new WebhookVerificationError(`timestamp is outside the tolerance of ${tolerance} s`)
  const text = typeof rawBody === 'string' ? rawBody : Buffer.from(rawBody).toString('utf8')
  try {
    return JSON.parse(text) as Event
  } catch {
    throw new WebhookVerificationError('payload is not JSON')
  }
}

/** The header value for a payload signed with one or more secrets (current first). */
export function signatureHeader(rawBody: string | Uint8Array, timestamp: number, secrets: readonly string[]): string {
  return [`t=${timestamp}`, ...secrets.map((secret) => `v1=${computeSignature(rawBody, timestamp, secret)}`)].join(',')
}
