import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { CreatedWebhook, CreateWebhookBody, DeletedWebhook, RETRY_SCHEDULE_DOC, RotatedSecret, UpdateWebhookBody, Webhook, WebhookList, WEBHOOK_ENDPOINTS_MAX } from './model.ts'
import * as service from './service.ts'
import type { WebhooksContext } from './service.ts'

const TAG = 'Webhooks'

export function webhooksRoutes(webhooks: WebhooksContext, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/webhooks', prefix: '/v1' })
    .use(access)
    .post(
      '/webhooks',
      async ({ body, principal, set }) => {
        set.status = 201
        return service.createWebhook(webhooks, principal.orgId, body)
      },
      {
        access: 'secret',
        body: CreateWebhookBody,
        response: { 201: CreatedWebhook },
        detail: apiDoc('Register a webhook endpoint', TAG, {
          description: `Secret key (or test key on sandbox). At most ${WEBHOOK_ENDPOINTS_MAX} endpoints per organization (limit_exceeded beyond). The secret (whsec_…) is shown only in this answer and at rotation. The endpoint receives matching events created from now on. ${RETRY_SCHEDULE_DOC}`,
        }),
      },
    )
    .get('/webhooks', ({ principal }) => service.listWebhooks(webhooks, principal.orgId), {
      access: 'secret',
      response: WebhookList,
      detail: apiDoc('List webhook endpoints', TAG, { description: 'Secrets are never returned.' }),
    })
    .get('/webhooks/:id', ({ params, principal }) => service.getWebhook(webhooks, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Webhook,
      detail: apiDoc('Read a webhook endpoint', TAG, { description: 'The secret is never returned.' }),
    })
    .patch('/webhooks/:id', ({ params, body, principal }) => service.updateWebhook(webhooks, principal.orgId, params.id, body), {
      access: 'secret',
      params: IdParams,
      body: UpdateWebhookBody,
      response: Webhook,
      detail: apiDoc('Change a webhook endpoint', TAG, { description: 'Send only the fields that change (url and/or events); the URL rules of registration apply.' }),
    })
    .delete('/webhooks/:id', ({ params, principal }) => service.deleteWebhook(webhooks, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: DeletedWebhook,
      detail: apiDoc('Delete a webhook endpoint', TAG, {
        description: 'Deliveries stop at once: scheduled retries end as failed and attempts in flight are aborted. Past deliveries stay visible in the event log.',
      }),
    })
    .post('/webhooks/:id/rotate-secret', ({ params, principal }) => service.rotateSecret(webhooks, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: RotatedSecret,
      detail: apiDoc('Rotate the signing secret', TAG, {
        description: 'Answers the new secret, shown only now. For 24 hours (on the organization\'s clock) deliveries carry two v1 signatures, new secret first, so receivers can switch without dropping deliveries.',
      }),
    })
}
