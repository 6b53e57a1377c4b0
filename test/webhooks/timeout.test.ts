import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { DELIVERY_TIMEOUT_MS } from '../../server/modules/webhooks/model.ts'
import { DEFAULT_WORKER_OPTIONS, DeliveryWorker } from '../../server/modules/webhooks/worker.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { eventually } from '../support/eventually.ts'
import { makeCertificate, startReceiver, type Certificate, type Receiver } from './receivers.ts'

/**
 * The attempt timeout, on a worker this file drives a pass at a time (`runOnce`) with a short
 * timeout, so the test does not wait out the contract's 10 s; the default is the contract's.
 */
let certificate: Certificate
let app: TestApp
let receiver: Receiver

beforeAll(async () => {
  certificate = makeCertificate()
  app = await startTestApp({ allowLoopbackWebhooks: true, webhookCaFile: certificate.certFile, webhookDelivery: false })
})
afterAll(async () => {
  receiver?.stop()
  await app.close()
  certificate.remove()
})

describe('attempt timeout', () => {
  test('the default timeout is the contract: 10 s', () => {
    expect(DELIVERY_TIMEOUT_MS).toBe(10_000)
    expect(DEFAULT_WORKER_OPTIONS.attemptTimeoutMs).toBe(10_000)
  })

  test('an answer that takes longer than the timeout is a timeout, retried, and the retry delivers', async () => {
    // The first attempt on a worker with a short timeout; the retry on one with the default, so a
    // slow machine cannot time the retry out too.
    const deps = { db: app.kassa.runtime.db, clock: app.kassa.runtime.clock, config: app.kassa.runtime.config }
    const worker = new DeliveryWorker(deps, { ...DEFAULT_WORKER_OPTIONS, attemptTimeoutMs: 300 })
    const patient = new DeliveryWorker(deps)
    try {
      const org = await app.createOrg('Slow')
      let release: () => void = () => {}
      receiver = startReceiver(certificate, (_received, index) => (index === 0 ? new Promise<number>((resolve) => (release = () => resolve(200))) : 200))
      const endpoint = await app.call('POST', '/v1/webhooks', { key: org.testKey, body: { url: receiver.url, events: ['account.created'] } })
      expect(endpoint.status).toBe(201)
      const account = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: 'slow-1' } })
      expect(account.status).toBe(201)

      await worker.runOnce()
      expect(receiver.received).toHaveLength(1)
      const eventId = receiver.received[0]!.event.id
      const delivery = async () => (await app.call('GET', `/v1/events/${eventId}`, { key: org.testKey })).body.deliveries[0]
      expect(await delivery()).toMatchObject({ webhookId: endpoint.body.id, status: 'retrying', attempts: 1, statusCode: null })

      // Not due again before the first retry's 5 s on the organization's clock.
      release()
      await patient.runOnce()
      expect(receiver.received).toHaveLength(1)
      expect((await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body: { seconds: 6 } })).status).toBe(200)
      // Due now: a pass attempts it (passes again only if a slow machine let the claim race the clock).
      await eventually(async () => {
        await patient.runOnce()
        return receiver.received.length >= 2
      }, { what: 'the retry attempted', timeoutMs: 10_000 })
      expect(receiver.received).toHaveLength(2)
      expect(receiver.received[1]!.event.id).toBe(eventId)
      expect(await delivery()).toMatchObject({ status: 'delivered', attempts: 2, statusCode: 200 })
    } finally {
      await worker.stop()
      await patient.stop()
    }
  })
})
