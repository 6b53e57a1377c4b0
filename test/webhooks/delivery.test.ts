import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import Stripe from 'stripe'
import { queryRows } from '../../db/client.ts'
import { appendEvent } from '../../server/modules/events/writer.ts'
import { verifyWebhook, WebhookVerificationError } from '../../server/modules/webhooks/verify.ts'
import { DEFAULT_WORKER_OPTIONS } from '../../server/modules/webhooks/worker.ts'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'
import { eventually } from '../support/eventually.ts'
import { makeCertificate, startReceiver, type Certificate, type Receiver, type Received } from './receivers.ts'

/**
 * Deliveries to real HTTPS receivers on loopback, trusted through the test-only CA setting. The
 * official `stripe` package's verifier judges every signature independently of our own.
 */
const stripe = new Stripe('sk_test_unused')
let certificate: Certificate
let app: TestApp
const receivers: Receiver[] = []

beforeAll(async () => {
  certificate = makeCertificate()
  app = await startTestApp({ allowLoopbackWebhooks: true, webhookCaFile: certificate.certFile })
})
afterAll(async () => {
  for (const receiver of receivers) receiver.stop()
  await app.close()
  certificate.remove()
})

function receiver(respond?: Parameters<typeof startReceiver>[1]): Receiver {
  const started = startReceiver(certificate, respond)
  receivers.push(started)
  return started
}

async function register(org: TestOrg, url: string, events: string[] = ['*']): Promise<{ id: string; secret: string }> {
  const response = await app.call('POST', '/v1/webhooks', { key: org.testKey, body: { url, events } })
  expect(response.status).toBe(201)
  return response.body
}

let externalIds = 0
async function mintAccount(org: TestOrg): Promise<string> {
  const response = await app.call('POST', '/v1/accounts', { key: org.testKey, body: { externalId: `user-${++externalIds}` } })
  expect(response.status).toBe(201)
  return response.body.id
}

async function deliveryOf(org: TestOrg, eventId: string, webhookId: string) {
  const response = await app.call('GET', `/v1/events/${eventId}`, { key: org.testKey })
  expect(response.status).toBe(200)
  return response.body.deliveries.find((delivery: { webhookId: string }) => delivery.webhookId === webhookId)
}

async function waitForDelivery(org: TestOrg, eventId: string, webhookId: string, predicate: (delivery: any) => boolean, timeoutMs = 15_000) {
  return eventually(() => deliveryOf(org, eventId, webhookId), { what: 'the delivery reaching the expected state', timeoutMs, intervalMs: 20, accept: (delivery) => delivery !== undefined && predicate(delivery) })
}

/** One whole pass of the app's delivery worker: whatever is due now has been attempted and recorded. */
const deliverDue = () => app.kassa.webhooks.delivery!.worker.runOnce()

async function advance(org: TestOrg, seconds: number): Promise<void> {
  const response = await app.call('POST', '/v1/sandbox/clock/advance', { key: org.testKey, body: { seconds } })
  expect(response.status).toBe(200)
}

const accountCreated = (accountId: string) => (received: Received[]) => received.some((entry) => entry.event.type === 'account.created' && entry.event.data.accountId === accountId)
const of = (received: Received[], accountId: string) => received.filter((entry) => entry.event.data.accountId === accountId)

describe('signed delivery', () => {
  test('delivers an event signed so that the official Stripe verifier and our own verifier accept it', async () => {
    const org = await app.createOrg('Signed')
    const target = receiver()
    const endpoint = await register(org, target.url, ['account.created'])
    expect(endpoint.secret).toMatch(/^whsec_/)
    const accountId = await mintAccount(org)
    const [delivered] = of(await target.waitFor(accountCreated(accountId)), accountId)
    expect(delivered!.signature).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/)
    const judged = await stripe.webhooks.constructEventAsync(delivered!.rawBody, delivered!.signature!, endpoint.secret, 300)
    expect(judged.id as string).toBe(delivered!.event.id)
    const ours = verifyWebhook(delivered!.rawBody, delivered!.signature, [endpoint.secret])
    expect(ours).toEqual(JSON.parse(delivered!.rawBody))
    expect(Object.keys(delivered!.event).sort()).toEqual(['created', 'data', 'id', 'orgId', 'type'])
    expect(delivered!.event).toMatchObject({ orgId: org.id, type: 'account.created', data: { accountId, externalId: expect.any(String) } })
    // A wrong secret and a tampered body are refused by both judges.
    await expect(stripe.webhooks.constructEventAsync(delivered!.rawBody, delivered!.signature!, 'whsec_wrong', 300)).rejects.toThrow()
    expect(() => verifyWebhook(delivered!.rawBody, delivered!.signature, ['whsec_wrong'])).toThrow(WebhookVerificationError)
    const tampered = delivered!.rawBody.replace(accountId, `${accountId}x`)
    await expect(stripe.webhooks.constructEventAsync(tampered, delivered!.signature!, endpoint.secret, 300)).rejects.toThrow()
    expect(() => verifyWebhook(tampered, delivered!.signature, [endpoint.secret])).toThrow(WebhookVerificationError)
    const delivery = await waitForDelivery(org, delivered!.event.id, endpoint.id, (entry) => entry.status === 'delivered')
    expect(delivery).toMatchObject({ webhookId: endpoint.id, status: 'delivered', attempts: 1, statusCode: 200 })
    expect(Date.parse(delivery.lastAttemptAt)).toBeGreaterThan(0)
  })

  test('after a rotation signs with both secrets, new first, for 24 hours on the organization clock, then with the new one alone', async () => {
    const org = await app.createOrg('Rotation')
    const target = receiver()
    const endpoint = await register(org, target.url, ['account.*'])
    const rotated = await app.call('POST', `/v1/webhooks/${endpoint.id}/rotate-secret`, { key: org.testKey })
    expect(rotated.status).toBe(200)
    expect(rotated.body.secret).toMatch(/^whsec_/)
    expect(rotated.body.secret).not.toBe(endpoint.secret)
    const clock = await app.call('GET', '/v1/sandbox/clock', { key: org.testKey })
    expect(Date.parse(rotated.body.previousSecretValidUntil) - Date.parse(clock.body.now)).toBeGreaterThan(24 * 3600 * 1000 - 60_000)

    const first = await mintAccount(org)
    const [both] = of(await target.waitFor(accountCreated(first)), first)
    const entries = both!.signature!.split(',')
    expect(entries.filter((entry) => entry.startsWith('v1='))).toHaveLength(2)
    const timestamp = Number(entries[0]!.slice(2))
    const { computeSignature } = await import('../../server/modules/webhooks/verify.ts')
    expect(entries[1]).toBe(`v1=${computeSignature(both!.rawBody, timestamp, rotated.body.secret)}`)
    expect(entries[2]).toBe(`v1=${computeSignature(both!.rawBody, timestamp, endpoint.secret)}`)
    for (const secret of [rotated.body.secret, endpoint.secret]) {
      expect(((await stripe.webhooks.constructEventAsync(both!.rawBody, both!.signature!, secret, 300)).id as string)).toBe(both!.event.id)
      expect(verifyWebhook(both!.rawBody, both!.signature, secret).id).toBe(both!.event.id)
    }

    await advance(org, 24 * 3600 + 1)
    const second = await mintAccount(org)
    const [single] = of(await target.waitFor(accountCreated(second)), second)
    expect(single!.signature!.split(',').filter((entry) => entry.startsWith('v1='))).toHaveLength(1)
    expect(((await stripe.webhooks.constructEventAsync(single!.rawBody, single!.signature!, rotated.body.secret, 300)).id as string)).toBe(single!.event.id)
    await expect(stripe.webhooks.constructEventAsync(single!.rawBody, single!.signature!, endpoint.secret, 300)).rejects.toThrow()
  })
})

describe('retries', () => {
  test('a 5xx is retried on the schedule and a later 2xx delivers', async () => {
    const org = await app.createOrg('Flaky')
    const target = receiver((_received, index) => (index === 0 ? 503 : 200))
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    const retrying = await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'retrying')
    expect(retrying).toMatchObject({ attempts: 1, statusCode: 503 })
    // The first retry is due 5 s later on the organization's clock; moving it makes it due now.
    await advance(org, 6)
    await target.waitFor((received) => received.length === 2)
    expect(target.received[1]!.event.id).toBe(first!.event.id)
    const delivered = await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'delivered')
    expect(delivered).toMatchObject({ attempts: 2, statusCode: 200 })
  })

  test('a 4xx is a permanent failure and is never retried', async () => {
    const org = await app.createOrg('Rejecting')
    const target = receiver(() => 410)
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    const failed = await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'failed')
    expect(failed).toMatchObject({ attempts: 1, statusCode: 410 })
    await advance(org, 3 * 24 * 3600)
    await deliverDue()
    expect(target.received).toHaveLength(1)
    expect(await deliveryOf(org, first!.event.id, endpoint.id)).toMatchObject({ status: 'failed', attempts: 1 })
  })

  test('fails a delivery after the eighth failed attempt, each retry made due by the organization clock', async () => {
    const org = await app.createOrg('Down')
    const target = receiver(() => 500)
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    const delays = [5, 300, 1800, 7200, 18000, 36000, 36000]
    for (const [index, delay] of delays.entries()) {
      await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.attempts === index + 1 && delivery.status === 'retrying')
      // The attempt's outcome (and so its next time) is written after the receiver answered.
      await app.kassa.webhooks.delivery!.worker.settled()
      // Just short of the delay, nothing is due yet.
      await advance(org, delay - 2)
      await deliverDue()
      expect(target.received).toHaveLength(index + 1)
      await advance(org, 3)
      await target.waitFor((received) => received.length === index + 2)
    }
    const failed = await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'failed')
    expect(failed).toMatchObject({ attempts: 8, statusCode: 500 })
    await advance(org, 7 * 24 * 3600)
    await deliverDue()
    expect(target.received).toHaveLength(8)
  }, 60_000)
})

describe('deleting an endpoint', () => {
  test('stops its scheduled retries at once', async () => {
    const org = await app.createOrg('Deleting')
    const target = receiver(() => 500)
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'retrying')
    const deleted = await app.call('DELETE', `/v1/webhooks/${endpoint.id}`, { key: org.testKey })
    expect(deleted.status).toBe(200)
    expect(deleted.body).toEqual({ id: endpoint.id, deleted: true })
    expect(await deliveryOf(org, first!.event.id, endpoint.id)).toMatchObject({ status: 'failed', attempts: 1 })
    await advance(org, 2 * 24 * 3600)
    await mintAccount(org)
    await deliverDue()
    expect(target.received).toHaveLength(1)
    expect((await app.call('GET', `/v1/webhooks/${endpoint.id}`, { key: org.testKey })).status).toBe(404)
  })

  test('aborts an attempt in flight, which is then neither recorded nor retried', async () => {
    const org = await app.createOrg('Deleting in flight')
    const target = receiver(async (received) => {
      await new Promise<void>((resolve) => {
        setTimeout(resolve, 8000)
        received.signal.addEventListener('abort', () => resolve())
      })
      return 200
    })
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    expect(target.open).toBe(1)
    expect((await app.call('DELETE', `/v1/webhooks/${endpoint.id}`, { key: org.testKey })).status).toBe(200)
    // The receiver sees the connection dropped long before its 8 s answer.
    const dropped = new Promise<boolean>((resolve) => {
      if (first!.signal.aborted) resolve(true)
      first!.signal.addEventListener('abort', () => resolve(true))
      setTimeout(() => resolve(false), 5000)
    })
    expect(await dropped).toBe(true)
    const rows = await queryRows<{ status: string; last_error: string }>(app.kassa.runtime.db, sql`select status, last_error from webhook_deliveries where webhook_id = ${endpoint.id}`)
    expect(rows).toEqual([{ status: 'failed', last_error: 'endpoint_deleted' }])
    await advance(org, 2 * 24 * 3600)
    await deliverDue()
    expect(target.received).toHaveLength(1)
    expect(await deliveryOf(org, first!.event.id, endpoint.id)).toMatchObject({ status: 'failed', statusCode: null })
  }, 20_000)
})

describe('who receives what', () => {
  test("an organization's endpoints never receive another organization's events", async () => {
    const alpha = await app.createOrg('Isolation alpha')
    const beta = await app.createOrg('Isolation beta')
    const alphaTarget = receiver()
    const betaTarget = receiver()
    await register(alpha, alphaTarget.url, ['*'])
    await register(beta, betaTarget.url, ['*'])
    const alphaAccount = await mintAccount(alpha)
    const betaAccount = await mintAccount(beta)
    await alphaTarget.waitFor(accountCreated(alphaAccount))
    await betaTarget.waitFor(accountCreated(betaAccount))
    await deliverDue()
    expect(alphaTarget.received.every((entry) => entry.event.orgId === alpha.id)).toBe(true)
    expect(betaTarget.received.every((entry) => entry.event.orgId === beta.id)).toBe(true)
    const alphaLog = await app.call('GET', '/v1/events?limit=200', { key: alpha.testKey })
    expect(alphaLog.body.events.some((event: { orgId: string }) => event.orgId === beta.id)).toBe(false)
  })

  test('a platform-wide vault event goes to every subscribed organization, each seeing only its own deliveries', async () => {
    const first = await app.createOrg('Vault one')
    const second = await app.createOrg('Vault two')
    const uninterested = await app.createOrg('Vault none')
    const firstTarget = receiver()
    const secondTarget = receiver()
    const otherTarget = receiver()
    const firstEndpoint = await register(first, firstTarget.url, ['vault.*'])
    const secondEndpoint = await register(second, secondTarget.url, ['vault.paused'])
    await register(uninterested, otherTarget.url, ['account.*'])
    await Bun.sleep(5)
    const eventId = await appendEvent(app.kassa.runtime.db, { orgId: null, type: 'vault.paused', data: { vaultId: 'vault_usdc_prime' }, created: new Date() })
    const [atFirst] = await firstTarget.waitFor((received) => received.some((entry) => entry.event.id === eventId))
    await secondTarget.waitFor((received) => received.some((entry) => entry.event.id === eventId))
    expect(atFirst!.event).toMatchObject({ id: eventId, orgId: null, type: 'vault.paused', data: { vaultId: 'vault_usdc_prime' } })
    await waitForDelivery(first, eventId, firstEndpoint.id, (delivery) => delivery.status === 'delivered')
    const seenByFirst = await app.call('GET', `/v1/events/${eventId}`, { key: first.testKey })
    expect(seenByFirst.body.deliveries.map((delivery: { webhookId: string }) => delivery.webhookId)).toEqual([firstEndpoint.id])
    const seenBySecond = await waitForDelivery(second, eventId, secondEndpoint.id, (delivery) => delivery.status === 'delivered')
    expect(seenBySecond.webhookId).toBe(secondEndpoint.id)
    await deliverDue()
    expect(otherTarget.received.some((entry) => entry.event.id === eventId)).toBe(false)
  })

  test('matches subscriptions by exact name, namespace wildcard and *, and an endpoint receives only events from its creation on', async () => {
    const org = await app.createOrg('Matching')
    const before = await mintAccount(org)
    const exact = receiver()
    const namespace = receiver()
    const everything = receiver()
    const elsewhere = receiver()
    await register(org, exact.url, ['account.created'])
    await register(org, namespace.url, ['account.*'])
    await register(org, everything.url, ['*'])
    await register(org, elsewhere.url, ['transaction.*', 'vault.*'])
    const accountId = await mintAccount(org)
    await app.call('POST', `/v1/sandbox/accounts/${accountId}/fund`, { key: org.testKey, body: { asset: 'USDC', amount: '5' } })
    await exact.waitFor(accountCreated(accountId))
    await namespace.waitFor((received) => received.some((entry) => entry.event.type === 'account.funded'))
    await everything.waitFor((received) => received.some((entry) => entry.event.type === 'account.funded'))
    await deliverDue()
    expect(exact.received.map((entry) => entry.event.type)).toEqual(['account.created'])
    expect(namespace.received.map((entry) => entry.event.type).sort()).toEqual(['account.created', 'account.funded'])
    expect(everything.received.map((entry) => entry.event.type)).toContain('account.funded')
    expect(elsewhere.received).toHaveLength(0)
    for (const target of [exact, namespace, everything]) expect(target.received.some((entry) => entry.event.data.accountId === before)).toBe(false)
  })
})

describe('isolation of slow receivers', () => {
  test('a receiver that hangs does not delay deliveries to another endpoint', async () => {
    const org = await app.createOrg('Slow and fast')
    const hanging = receiver(() => new Promise<number>((resolve) => setTimeout(() => resolve(200), 9000)))
    const fast = receiver()
    await register(org, hanging.url, ['account.created'])
    await register(org, fast.url, ['account.created'])
    const accounts: string[] = []
    for (let index = 0; index < DEFAULT_WORKER_OPTIONS.perEndpointMax + 6; index++) accounts.push(await mintAccount(org))
    await fast.waitFor((received) => accounts.every((accountId) => received.some((entry) => entry.event.data.accountId === accountId)), 5000)
    // All of them reached the fast receiver while the slow one still holds its first requests open,
    // and the slow one holds at most its per-endpoint share of attempts.
    expect(hanging.open).toBeGreaterThan(0)
    expect(hanging.open).toBeLessThanOrEqual(DEFAULT_WORKER_OPTIONS.perEndpointMax)
  }, 20_000)
})

describe('resend', () => {
  test('the organization resends one event to one endpoint as a fresh attempt sequence', async () => {
    const org = await app.createOrg('Resend')
    const target = receiver(() => 400)
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'failed')
    target.respond = () => 200
    const resent = await app.call('POST', `/v1/events/${first!.event.id}/resend`, { key: org.testKey, body: { webhookId: endpoint.id } })
    expect(resent.status).toBe(202)
    expect(resent.body).toMatchObject({ id: first!.event.id, deliveries: [{ webhookId: endpoint.id, attempts: expect.any(Number) }] })
    await target.waitFor((received) => received.length === 2)
    expect(await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'delivered')).toMatchObject({ attempts: 1, statusCode: 200 })
  })

  test('refuses a resend to an unknown or foreign endpoint and of a foreign event, scheduling nothing', async () => {
    const org = await app.createOrg('Resend refusals')
    const other = await app.createOrg('Resend other')
    const target = receiver()
    const endpoint = await register(org, target.url, ['account.created'])
    const foreignEndpoint = await register(other, receiver().url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    const foreignEvent = await appendEvent(app.kassa.runtime.db, { orgId: other.id, type: 'account.updated', data: {}, created: new Date() })
    const rowsBefore = await queryRows(app.kassa.runtime.db, sql`select * from webhook_deliveries order by id`)
    const unknown = await app.call('POST', `/v1/events/${first!.event.id}/resend`, { key: org.testKey, body: { webhookId: 'wh_0000' } })
    expect({ status: unknown.status, field: unknown.body.error.field }).toEqual({ status: 400, field: 'webhookId' })
    const foreign = await app.call('POST', `/v1/events/${first!.event.id}/resend`, { key: org.testKey, body: { webhookId: foreignEndpoint.id } })
    expect({ status: foreign.status, field: foreign.body.error.field }).toEqual({ status: 400, field: 'webhookId' })
    expect((await app.call('POST', `/v1/events/${foreignEvent}/resend`, { key: org.testKey, body: { webhookId: endpoint.id } })).status).toBe(404)
    expect((await app.call('POST', `/v1/events/${first!.event.id}/resend`, { key: org.publishableKey, body: { webhookId: endpoint.id } })).status).toBe(403)
    const operatorMismatch = await app.ops('POST', `/ops/v1/events/${foreignEvent}/resend`, { webhookId: endpoint.id })
    expect({ status: operatorMismatch.status, field: operatorMismatch.body.error.field }).toEqual({ status: 400, field: 'webhookId' })
    await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'delivered')
    const rowsAfter = await queryRows(app.kassa.runtime.db, sql`select * from webhook_deliveries where id <= ${String((rowsBefore.at(-1) as { id: string | bigint }).id)}::bigint order by id`)
    expect(rowsAfter.map((row: any) => [row.event_id, row.webhook_id])).toEqual(rowsBefore.map((row: any) => [row.event_id, row.webhook_id]))
  })

  test('an operator resends an event to an endpoint of the owning organization', async () => {
    const org = await app.createOrg('Operator resend')
    const target = receiver()
    const endpoint = await register(org, target.url, ['account.created'])
    const accountId = await mintAccount(org)
    const [first] = await target.waitFor(accountCreated(accountId))
    await waitForDelivery(org, first!.event.id, endpoint.id, (delivery) => delivery.status === 'delivered')
    const resent = await app.ops('POST', `/ops/v1/events/${first!.event.id}/resend`, { webhookId: endpoint.id })
    expect(resent.status).toBe(202)
    await target.waitFor((received) => received.filter((entry) => entry.event.id === first!.event.id).length === 2)
    expect(target.received[1]!.event).toEqual(first!.event)
    const unauthenticated = await app.call('POST', `/ops/v1/events/${first!.event.id}/resend`, { body: { webhookId: endpoint.id } })
    expect(unauthenticated.status).toBe(401)
  })
})
