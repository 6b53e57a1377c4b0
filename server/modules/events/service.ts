import { invalid, notFound } from '../../lib/errors.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { Database } from '../../../db/client.ts'
import type { Clock } from '../clock/clock.ts'
import * as webhooksRepo from '../webhooks/repo.ts'
import { EVENT_TYPE_FILTER_MAX, EVENT_TYPE_PATTERN, type DeliveryView, type EventView, type ListEventsInput } from './model.ts'
import * as repo from './repo.ts'

/** What the event log services work with; `kickDelivery` is the webhooks module's. */
export interface EventsContext {
  db: Database
  clock: Clock
  /** Tells the delivery workers (this process's and the others') that a resend is due now. */
  kickDelivery(): Promise<void>
}

function toDeliveryView(row: repo.DeliveryRecord): DeliveryView {
  return {
    webhookId: row.webhookId,
    status: row.status,
    attempts: row.attempts,
    statusCode: row.lastStatusCode ?? null,
    lastAttemptAt: row.lastAttemptAt ? row.lastAttemptAt.toISOString() : null,
  }
}

function toEventView(row: repo.EventRecord, deliveries: repo.DeliveryRecord[]): EventView {
  return {
    id: row.id,
    orgId: row.orgId,
    type: row.type,
    created: row.createdAt.toISOString(),
    data: row.data,
    deliveries: deliveries.filter((delivery) => delivery.eventId === row.id).map(toDeliveryView),
  }
}

function parseTypes(raw: string | undefined): string[] | undefined {
  if (raw === undefined) return undefined
  const types = [...new Set(raw.split(',').map((type) => type.trim()))]
  if (types.length > EVENT_TYPE_FILTER_MAX) throw invalid('types', `types holds at most ${EVENT_TYPE_FILTER_MAX} event types`)
  for (const type of types) {
    if (!EVENT_TYPE_PATTERN.test(type) || type.length > 100) throw invalid('types', `"${type.slice(0, 100)}" is not an event type (types is a comma-separated list of exact types)`)
  }
  return types
}

/**
 * The organization's log: its own events and the platform-wide vault.* events, oldest first. Only
 * events of finished transactions are served, in the order their transactions were assigned ids,
 * so paging with `after` while events are being written never skips or repeats one.
 */
export async function listEvents(context: EventsContext, orgId: string, query: ListEventsInput): Promise<{ events: EventView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const types = parseTypes(query.types)
  let after: { txid: string; seq: string } | undefined
  if (query.after !== undefined) {
    const cursor = await repo.findEventInLog(context.db, orgId, query.after)
    if (!cursor) throw invalid('after', 'after must be the id of an event in this organization\'s log')
    after = { txid: cursor.txid, seq: cursor.seq }
  }
  const rows = await repo.listEventsInLog(context.db, orgId, { after, types, limit: limit + 1 })
  const deliveries = await repo.deliveriesOf(context.db, orgId, rows.slice(0, limit).map((row) => row.id))
  const page = onePage(rows, limit, (row) => toEventView(row, deliveries))
  return { events: page.items, hasMore: page.hasMore }
}

export async function getEvent(context: EventsContext, orgId: string, id: string): Promise<EventView> {
  const row = await repo.findEventInLog(context.db, orgId, id)
  if (!row) throw notFound('event')
  return toEventView(row, await repo.deliveriesOf(context.db, orgId, [row.id]))
}

/**
 * Schedules a fresh attempt sequence of one event to one endpoint, due at once, whatever happened
 * before (delivered, failed after the retry window, never matched). The endpoint must be live and
 * belong to an organization whose log holds the event.
 */
async function resend(context: EventsContext, event: repo.EventRecord, webhook: webhooksRepo.WebhookRecord): Promise<EventView> {
  if (event.orgId !== null && event.orgId !== webhook.orgId) throw invalid('webhookId', "The endpoint's organization does not see this event")
  await webhooksRepo.scheduleResend(context.db, { eventId: event.id, webhookId: webhook.id, orgId: webhook.orgId, dueAt: new Date(context.clock.wallNowMs()) })
  await context.kickDelivery()
  return toEventView(event, await repo.deliveriesOf(context.db, webhook.orgId, [event.id]))
}

export async function resendForOrganization(context: EventsContext, orgId: string, eventId: string, webhookId: string): Promise<EventView> {
  const event = await repo.findEventInLog(context.db, orgId, eventId)
  if (!event) throw notFound('event')
  const webhook = await webhooksRepo.findLiveWebhook(context.db, orgId, webhookId)
  if (!webhook) throw invalid('webhookId', 'webhookId must name a live webhook endpoint of this organization')
  return resend(context, event, webhook)
}

export async function resendForOperator(context: EventsContext, eventId: string, webhookId: string): Promise<EventView> {
  const event = await repo.findEventById(context.db, eventId)
  if (!event) throw notFound('event')
  const webhook = await webhooksRepo.findLiveWebhookAnyOrg(context.db, webhookId)
  if (!webhook) throw invalid('webhookId', 'webhookId must name a live webhook endpoint')
  return resend(context, event, webhook)
}
