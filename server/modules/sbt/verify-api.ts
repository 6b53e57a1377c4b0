import { createHmac } from 'node:crypto'
import https from 'node:https'
import { isIP } from 'node:net'
import { checkWebhookUrl, UrlRefused, type UrlPolicy } from '../../lib/url-policy.ts'
import { SbtError } from './envelope.ts'

export const VERIFY_API_TIMEOUT_MS = 5000
const RESPONSE_BYTES_MAX = 16 * 1024

export interface VerifyApiOptions {
  policy: UrlPolicy
  timeoutMs: number
  /** Extra trusted certificate authority (the test-only `WEBHOOK_CA_FILE`). */
  ca?: string | Buffer
  nowMs: () => number
}

export interface VerifyApiRequest {
  credentialId: string
  suiAddress: string
  bindings: Record<string, string>
}

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, the same scheme as Kassa's webhooks. */
export function verifyApiSignature(secret: string, timestampSeconds: number, body: string): string {
  return `t=${timestampSeconds},v1=${createHmac('sha256', secret).update(`${timestampSeconds}.${body}`).digest('hex')}`
}

/**
 * Asks an issuer's Verify API (labelType 40 and 113) whether a user did its task: one HTTPS POST,
 * signed, with a timeout, to a URL judged by the same SSRF rules as webhook receivers (checked at
 * import and again here on the address actually connected to; redirects are not followed). The
 * issuer answers 200 with `{"verified": true|false}`; anything else is the issuer's failure, not
 * the user's, and is reported as such (never as a pass).
 */
export async function callVerifyApi(rawUrl: string, secret: string, request: VerifyApiRequest, options: VerifyApiOptions): Promise<boolean> {
  let address: string
  let hostname: string
  let url: URL
  try {
    const checked = await checkWebhookUrl(rawUrl, options.policy, { requireResolution: true })
    address = checked.addresses[0]!
    hostname = checked.hostname
    url = checked.url
  } catch (error) {
    if (error instanceof UrlRefused) throw new SbtError('verify_api_unavailable', `The issuer's Verify API URL is refused: ${error.message}`)
    throw error
  }
  const body = JSON.stringify(request)
  const signature = verifyApiSignature(secret, Math.floor(options.nowMs() / 1000), body)
  const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
    let settled = false
    const finish = (error: Error | undefined, value?: { status: number; text: string }) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      if (error) {
        outgoing.destroy()
        reject(error)
      } else resolve(value!)
    }
    const outgoing = https.request(
      {
        method: 'POST',
        host: address,
        port: url.port === '' ? 443 : Number(url.port),
        path: `${url.pathname}${url.search}`,
        ...(isIP(hostname) !== 0 ? {} : { servername: hostname }),
        ca: options.ca,
        agent: false,
        headers: { host: url.host, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), 'x-kassa-signature': signature },
      },
      (response) => {
        const chunks: Buffer[] = []
        let received = 0
        response.on('data', (chunk: Buffer) => {
          received += chunk.length
          if (received > RESPONSE_BYTES_MAX) finish(new Error('answer too large'))
          else chunks.push(chunk)
        })
        response.on('end', () => finish(undefined, { status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }))
        response.on('error', (error) => finish(error))
      },
    )
    const timer = setTimeout(() => finish(new Error(`no answer within ${options.timeoutMs} ms`)), options.timeoutMs)
    outgoing.on('error', (error) => finish(error))
    outgoing.end(body)
  }).catch((error: Error) => {
    throw new SbtError('verify_api_unavailable', `The issuer's Verify API failed: ${error.message}`)
  })
  if (answer.status !== 200) throw new SbtError('verify_api_unavailable', `The issuer's Verify API answered HTTP ${answer.status}`)
  let parsed: unknown
  try {
    parsed = JSON.parse(answer.text)
  } catch {
    throw new SbtError('verify_api_unavailable', "The issuer's Verify API answered something other than JSON")
  }
  const verified = (parsed as { verified?: unknown } | null)?.verified
  if (typeof verified !== 'boolean') throw new SbtError('verify_api_unavailable', 'The issuer\'s Verify API must answer {"verified": true|false}')
  return verified
}
