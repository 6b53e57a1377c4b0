/**
 * Webhook load for benchmarks: N real HTTPS receivers on loopback (a self-signed certificate made
 * by `openssl`) and their endpoints registered for an organization through the API. The server
 * under test must be started with `serverEnv` (test-only settings: loopback receivers allowed, the
 * certificate trusted), so create the load first, start the server, then `register`.
 *
 *   const load = createWebhookLoad(10)
 *   const server = startServer({ ...load.serverEnv, DATABASE_URL })
 *   await load.register(base, key)            // ten endpoints subscribed to '*'
 *   … run the benchmark …; load.deliveries holds what arrived; load.stop()
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface ArrivedDelivery {
  receiver: number
  eventId: string
  type: string
  data: Record<string, unknown>
  /** `performance.timeOrigin + performance.now()` at arrival, comparable across this process. */
  arrivedAtMs: number
}

export interface WebhookLoad {
  serverEnv: Record<string, string>
  urls: string[]
  deliveries: ArrivedDelivery[]
  /** Registers one endpoint per receiver for the organization of `key`; answers their ids. */
  register(base: string, key: string, events?: string[]): Promise<string[]>
  stop(): void
}

export function nowMs(): number {
  return performance.timeOrigin + performance.now()
}

export function createWebhookLoad(count: number, options: { status?: number } = {}): WebhookLoad {
  const dir = mkdtempSync(join(tmpdir(), 'kassa-bench-tls-'))
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
    { stdio: 'ignore' },
  )
  const cert = readFileSync(certFile, 'utf8')
  const key = readFileSync(keyFile, 'utf8')
  const deliveries: ArrivedDelivery[] = []
  const servers = Array.from({ length: count }, (_, receiver) =>
    Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      tls: { cert, key },
      async fetch(request) {
        const event = (await request.json()) as { id: string; type: string; data: Record<string, unknown> }
        deliveries.push({ receiver, eventId: event.id, type: event.type, data: event.data, arrivedAtMs: nowMs() })
        return new Response(null, { status: options.status ?? 204 })
      },
    }),
  )
  const urls = servers.map((server) => `https://localhost:${server.port}/hook`)
  return {
    serverEnv: { ALLOW_LOOPBACK_WEBHOOKS: 'true', WEBHOOK_CA_FILE: certFile },
    urls,
    deliveries,
    async register(base, apiKey, events = ['*']) {
      const ids: string[] = []
      for (const url of urls) {
        const response = await fetch(`${base}/v1/webhooks`, {
          method: 'POST',
          headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ url, events }),
        })
        const body = (await response.json()) as { id?: string }
        if (response.status !== 201 || body.id === undefined) throw new Error(`registering ${url} failed: ${response.status} ${JSON.stringify(body)}`)
        ids.push(body.id)
      }
      return ids
    },
    stop() {
      for (const server of servers) server.stop(true)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
