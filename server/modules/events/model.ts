import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'

/** At most this many types in one `types` filter. */
export const EVENT_TYPE_FILTER_MAX = 20
export const EVENT_TYPE_PATTERN = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/

export const DeliveryStatus = t.Union([t.Literal('pending'), t.Literal('delivered'), t.Literal('retrying'), t.Literal('failed')], {
  description: 'pending: not attempted yet; retrying: an attempt failed and another is scheduled; delivered: a 2xx answer; failed: a 4xx answer, the endpoint was deleted, or the last attempt failed',
})

export const Delivery = t.Object(
  {
    webhookId: t.String(),
    status: DeliveryStatus,
    attempts: t.Integer({ description: 'Attempts started so far in the current sequence (a resend starts a new one)' }),
    statusCode: t.Union([t.Integer(), t.Null()], { description: 'HTTP status of the last answer; null before any answer or after a connection error or timeout' }),
    lastAttemptAt: t.Union([t.String({ format: 'date-time' }), t.Null()], { description: "When the last attempt started, on the organization's clock" }),
  },
  { title: 'Delivery' },
)

export const Event = t.Object(
  {
    id: t.String({ examples: ['evt_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    orgId: t.Union([t.String(), t.Null()], { description: 'Null for platform-wide vault.* events' }),
    type: t.String({ examples: ['account.created'] }),
    created: t.String({ format: 'date-time' }),
    data: t.Record(t.String(), t.Unknown()),
    deliveries: t.Array(Delivery, { description: "This organization's deliveries of the event, one per endpoint it was sent to" }),
  },
  { title: 'Event' },
)

export const EventList = t.Object({ events: t.Array(Event), hasMore: t.Boolean() }, { title: 'EventList' })

export const ListEventsQuery = t.Object(
  {
    after: t.Optional(t.String({ maxLength: 64, description: 'An event id from this log: the page starts after it. An id that is not in the organization\'s log is invalid_request naming after.' })),
    types: t.Optional(t.String({ maxLength: 2000, description: `Comma-separated exact event types, at most ${EVENT_TYPE_FILTER_MAX}` })),
    limit: PageLimitQuery,
  },
  { additionalProperties: false },
)

export const ResendBody = t.Object({ webhookId: t.String({ maxLength: 64, description: 'The endpoint to send the event to again' }) }, { additionalProperties: false })

export type EventView = Static<typeof Event>
export type DeliveryView = Static<typeof Delivery>
export type ListEventsInput = Static<typeof ListEventsQuery>
