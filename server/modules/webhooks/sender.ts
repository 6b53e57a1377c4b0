import https from 'node:https'
import { isIP } from 'node:net'
import { checkWebhookUrl, UrlRefused, type UrlPolicy } from '../../lib/url-policy.ts'

export type AttemptResult =
  | { kind: 'answered'; statusCode: number }
  | { kind: 'timeout' }
  | { kind: 'connection_error'; message: string }
  | { kind: 'refused_address'; message: string }
  | { kind: 'aborted' }

export interface SendOptions {
  policy: UrlPolicy
  timeoutMs: number
  /** Extra trusted certificate authority (test-only setting). */
  ca?: string | Buffer
  signal: AbortSignal
  headers: Record<string, string>
  /**
   * A keep-alive agent: connections are pooled per (address, port, SNI name, CA), so a pooled
   * connection is always one to an address that was checked.
   */
  agent?: https.Agent
}

/** Answers are read and thrown away; at most this much is read before the connection is dropped. */
const RESPONSE_BYTES_MAX = 64 * 1024

/**
 * One delivery attempt. The host is resolved and every address judged right here, then the
 * connection goes to the judged address itself (TLS still checks the certificate against the host
 * name through SNI), so a DNS answer that changes between check and connect cannot redirect it.
 * Redirects are not followed.
 */
export async function sendWebhook(rawUrl: string, body: string, options: SendOptions): Promise<AttemptResult> {
  let address: string
  let hostname: string
  let url: URL
  try {
    const checked = await checkWebhookUrl(rawUrl, options.policy, { requireResolution: true })
    address = checked.addresses[0]!
    hostname = checked.hostname
    url = checked.url
  } catch (error) {
    if (error instanceof UrlRefused) return { kind: 'refused_address', message: error.message }
    return { kind: 'connection_error', message: String(error) }
  }
  if (options.signal.aborted) return { kind: 'aborted' }
  return new Promise<AttemptResult>((resolve) => {
    let settled = false
    // A complete answer leaves the connection to the agent for reuse; anything else closes it.
    const finish = (result: AttemptResult, complete = false) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      options.signal.removeEventListener('abort', onAbort)
      if (!complete) request.destroy()
      resolve(result)
    }
    const literal = isIP(hostname) !== 0
    const request = https.request(
      {
        method: 'POST',
        host: address,
        port: url.port === '' ? 443 : Number(url.port),
        path: `${url.pathname}${url.search}`,
        // SNI and certificate checks use the name; a literal address is checked as itself.
        ...(literal ? {} : { servername: hostname }),
        ca: options.ca,
        headers: { ...options.headers, host: url.host, 'content-length': String(Buffer.byteLength(body)) },
        agent: options.agent ?? false,
      },
      (response) => {
        let received = 0
        response.on('data', (chunk: Buffer) => {
          received += chunk.length
          if (received > RESPONSE_BYTES_MAX) finish({ kind: 'answered', statusCode: response.statusCode ?? 0 })
        })
        response.on('end', () => finish({ kind: 'answered', statusCode: response.statusCode ?? 0 }, true))
        response.on('error', (error) => finish({ kind: 'connection_error', message: error.message }))
      },
    )
    const timer = setTimeout(() => finish({ kind: 'timeout' }), options.timeoutMs)
    const onAbort = () => finish({ kind: 'aborted' })
    options.signal.addEventListener('abort', onAbort)
    request.on('error', (error) => finish({ kind: 'connection_error', message: error.message }))
    request.end(body)
  })
}
