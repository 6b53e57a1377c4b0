import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { RETRY_SCHEDULE_DOC } from '../webhooks/model.ts'
import { Event, EventList, ListEventsQuery, ResendBody } from './model.ts'
import * as service from './service.ts'
import type { EventsContext } from './service.ts'

const TAG = 'Events'
const LOG_DOC =
  'The organization\'s events plus the platform-wide vault.* events (orgId null), oldest first, each with this organization\'s deliveries. ' +
  'The log is ordered by the database transaction that wrote each event and serves only events whose transaction has finished, so paging with after (the last id of a page) while events are being written never skips or repeats one; an event can appear a moment after its change committed. ' +
  'types filters by exact types (comma-separated, at most 20). limit is 1 to 200 (default 50); anything else is invalid_request naming limit. An after that is not an event of this log is invalid_request naming after.'

export function eventsRoutes(events: EventsContext, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/events', prefix: '/v1' })
    .use(access)
    .get('/events', ({ query, principal }) => service.listEvents(events, principal.orgId, query), {
      access: 'secret',
      query: ListEventsQuery,
      response: EventList,
      detail: apiDoc('List events (the event log)', TAG, { description: `${LOG_DOC} ${RETRY_SCHEDULE_DOC}` }),
    })
    .get('/events/:id', ({ params, principal }) => service.getEvent(events, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Event,
      detail: apiDoc('Read an event', TAG, { description: 'With this organization\'s deliveries of it.' }),
    })
    .post(
      '/events/:id/resend',
      async ({ params, body, principal, set }) => {
        set.status = 202
        return service.resendForOrganization(events, principal.orgId, params.id, body.webhookId)
      },
      {
        access: 'secret',
        params: IdParams,
        body: ResendBody,
        response: { 202: Event },
        detail: apiDoc('Resend an event to one endpoint', TAG, {
          description:
            'Schedules a fresh attempt sequence (the full retry schedule) of this event to the named live endpoint of the organization, due at once, whatever happened before: the way back for a receiver that was down past the retry window. Answers 202 with the event and its deliveries.',
        }),
      },
    )
}

export function eventsOpsRoutes(events: EventsContext) {
  return new Elysia({ name: 'kassa/ops-events', prefix: '/ops/v1' }).post(
    '/events/:id/resend',
    async ({ params, body, set }) => {
      set.status = 202
      return service.resendForOperator(events, params.id, body.webhookId)
    },
    {
      params: IdParams,
      body: ResendBody,
      response: { 202: Event },
      detail: apiDoc('Resend an event to one endpoint', 'Operators', {
        security: 'operator',
        description: 'As the organization\'s resend, for any organization: the endpoint must be live and belong to the organization that owns the event (any organization for vault.* events). The deliveries shown are the endpoint organization\'s.',
      }),
    },
  )
}
