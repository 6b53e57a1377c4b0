import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import type { Runtime } from '../../runtime.ts'
import { CreateQuoteBody, Quote } from './model.ts'
import * as service from './service.ts'


export function quotesRoutes(runtime: Runtime, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/quotes', prefix: '/v1' })
    .use(access)
    .post(
      '/quotes',
      (context) => context.answerInCommit(context, 201, () => service.createQuote(runtime, context.principal.orgId, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateQuoteBody,
        response: { 201: Quote },
        detail: apiDoc('Quote a withdrawal', 'Quotes', {
          description:
            'All-in and itemized (network fee and service fee), with an expiry on the organization\'s clock. Executable once: a withdrawal naming it after expiry is quote_expired, a second one quote_consumed.',
        }),
      },
    )
    .get('/quotes/:id', ({ params, principal }) => service.getQuote(runtime, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Quote,
      detail: apiDoc('Read a quote', 'Quotes'),
    })
}
