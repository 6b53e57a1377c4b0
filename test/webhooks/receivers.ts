import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eventually } from '../support/eventually.ts'

/**
 * Real HTTPS receivers for webhook tests: a self-signed certificate made by `openssl` for
 * localhost, 127.0.0.1 and ::1, and Bun servers on loopback that record every request as received.
 */
export interface Certificate {
  dir: string
  certFile: string
  keyFile: string
  cert: string
  key: string
  remove(): void
}

export function makeCertificate(): Certificate {
  const dir = mkdtempSync(join(tmpdir(), 'kassa-webhook-tls-'))
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  execFileSync(
    'openssl',
    [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1',
    ],
    { stdio: 'ignore' },
  )
  return { dir, certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8'), remove: () => rmSync(dir, { recursive: true, force: true }) }
}

export interface Received {
  rawBody: string
  signature: string | null
  headers: Headers
  receivedAtMs: number
  /** Aborted when the sender drops the connection before the answer. */
  signal: AbortSignal
  event: { id: string; orgId: string | null; type: string; created: string; data: Record<string, any> }
}

/** What a receiver answers: a status, or a promise of one (a slow receiver), per request. */
export type Responder = (received: Received, index: number) => number | Promise<number>

export interface Receiver {
  url: string
  received: Received[]
  /** Requests whose answer is still pending (slow or hanging receivers). */
  open: number
  respond: Responder
  waitFor(predicate: (received: Received[]) => boolean, timeoutMs?: number): Promise<Received[]>
  stop(): void
}

export function startReceiver(certificate: Certificate, respond: Responder = () => 200, path = '/hook'): Receiver {
  const receiver: Receiver = {
    url: '',
    received: [],
    open: 0,
    respond,
    async waitFor(predicate, timeoutMs = 15_000) {
      await eventually(() => predicate(receiver.received), { what: `the receiver's requests (got ${receiver.received.length})`, timeoutMs, intervalMs: 10 })
      return receiver.received
    },
    stop: () => server.stop(true),
  }
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { cert: certificate.cert, key: certificate.key },
    idleTimeout: 60,
    async fetch(request) {
      const rawBody = await request.text()
      const received: Received = { rawBody, signature: request.headers.get('x-service-signature'), headers: request.headers, receivedAtMs: Date.now(), signal: request.signal, event: JSON.parse(rawBody) }
      receiver.received.push(received)
      receiver.open += 1
      try {
        const status = await receiver.respond(received, receiver.received.length - 1)
        return new Response(status >= 200 && status < 300 ? 'ok' : 'no', { status })
      } finally {
        receiver.open -= 1
      }
    },
  })
  receiver.url = `https://localhost:${server.port}${path}`
  return receiver
}
