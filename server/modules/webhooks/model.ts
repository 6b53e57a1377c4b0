import { t, type Static } from 'elysia'

/** At most this many endpoints per organization (the contract's limit). */
export const WEBHOOK_ENDPOINTS_MAX = 10
/** One endpoint subscribes to at most this many names or patterns. */
export const WEBHOOK_SUBSCRIPTIONS_MAX = 64

/**
 * Event namespaces a subscription may name. The contract's four (`transaction`, `account`,
 * `treasury`, `vault`) and the namespaces this service also emits; new types may appear under any
 * of them at any time.
 */
export const EVENT_NAMESPACES = ['transaction', 'account', 'treasury', 'vault', 'funding', 'payment', 'hold', 'transfer', 'statement'] as const

/**
 * Svix's schedule: the first attempt at once, then retries after these delays (8 attempts over
 * about 27 h), measured on the receiving organization's clock. After the last, `failed`.
 */
export const RETRY_DELAYS_SECONDS = [5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600] as const
export const DELIVERY_ATTEMPTS_MAX = RETRY_DELAYS_SECONDS.length + 1
/** Each attempt is abandoned (and retried) after 10 s without a complete answer. */
export const DELIVERY_TIMEOUT_MS = 10_000
/** The previous secret keeps signing for this long after a rotation. */
export const SECRET_ROTATION_OVERLAP_SECONDS = 24 * 3600

export const RETRY_SCHEDULE_DOC =
  'Delivery: at least once, signed (X-Service-Signature: t=<unix>,v1=<hex>, HMAC-SHA256 of "<t>.<raw body>" keyed with the endpoint secret; two v1 entries, new secret first, for 24 h after a rotation). ' +
  'A 2xx answer is delivered; a 4xx is a permanent failure of that delivery (failed, not retried); a 5xx, a 3xx (redirects are not followed), a connection error, a refused address or no complete answer within 10 s is retried. ' +
  'Attempts: at once, then after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h (8 attempts, about 27 h, on the organization\'s clock); after the 8th the delivery is failed. ' +
  'Statuses: pending (not attempted yet), retrying (an attempt failed, another is scheduled), delivered, failed.'

const subscriptionPattern = `^(\\*|(${EVENT_NAMESPACES.join('|')})\\.(\\*|[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)*))$`

const Subscription = t.String({
  pattern: subscriptionPattern,
  maxLength: 100,
  description: `An exact event name (account.created), a namespace wildcard (${EVENT_NAMESPACES.map((name) => `${name}.*`).join(', ')}) or * for everything`,
  error: 'events must hold exact event names, <namespace>.* or *',
})

const WebhookUrl = t.String({
  maxLength: 2048,
  description: 'HTTPS only. Localhost, loopback, private (RFC 1918, CGNAT, IPv6 unique-local), link-local, cloud-metadata and other non-public addresses are refused, in any spelling, and so are names that resolve to them; the check runs again at every delivery against the address connected to.',
  examples: ['https://example.com/webhooks/kassa'],
})

const Subscriptions = t.Array(Subscription, { minItems: 1, maxItems: WEBHOOK_SUBSCRIPTIONS_MAX, uniqueItems: true })

export const CreateWebhookBody = t.Object({ url: WebhookUrl, events: Subscriptions }, { additionalProperties: false })

export const UpdateWebhookBody = t.Object(
  { url: t.Optional(WebhookUrl), events: t.Optional(Subscriptions) },
  { additionalProperties: false, description: 'Only the changed fields; at least one' },
)

const WebhookFields = {
  id: t.String({ examples: ['wh_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
  url: t.String(),
  events: t.Array(t.String()),
  createdAt: t.String({ format: 'date-time' }),
}

export const Webhook = t.Object(WebhookFields, { title: 'Webhook' })

export const CreatedWebhook = t.Object(
  { ...WebhookFields, secret: t.String({ description: 'whsec_…: shown only now and at rotation', examples: ['whsec_5Wq3…'] }) },
  { title: 'CreatedWebhook' },
)

export const WebhookList = t.Object({ webhooks: t.Array(Webhook) }, { title: 'WebhookList' })

export const DeletedWebhook = t.Object({ id: t.String(), deleted: t.Literal(true) }, { title: 'DeletedWebhook' })

export const RotatedSecret = t.Object(
  {
    secret: t.String({ description: 'The new whsec_… secret, shown only now' }),
    previousSecretValidUntil: t.String({ format: 'date-time', description: 'Until then deliveries carry a second v1 signature made with the previous secret' }),
  },
  { title: 'RotatedSecret' },
)

export type CreateWebhookInput = Static<typeof CreateWebhookBody>
export type UpdateWebhookInput = Static<typeof UpdateWebhookBody>
export type WebhookView = Static<typeof Webhook>
