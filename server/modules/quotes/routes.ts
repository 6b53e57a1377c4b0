import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { CreateQuoteBody, Quote } from './model.ts'
import * as service from './service.ts'

export function quotesRoutes(deps: service.QuotesDeps, access: AccessPlugin, instantRedeem?: service.InstantRedeemQuoter) {
  return new Elysia({ name: 'kassa/quotes', prefix: '/v1' })
    .use(access)
    .post(
      '/quotes',
      (context) => context.answerInCommit(context, 201, () => service.createQuote(deps, context.principal.orgId, context.body, instantRedeem)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateQuoteBody,
        response: { 201: Quote },
        detail: apiDoc('Quote a withdrawal or an instant redemption', 'Quotes', {
          description:
            'All-in and itemized (network fee and service fee), with an expiry on the organization\'s clock. Executable once: a withdrawal (or an instant redemption) naming it after expiry is quote_expired, a second one quote_consumed. kind instant_redeem (accountId, vaultId, shares): the shares\' value at the vault\'s current price rounded down (totalDebited), the instant-redemption fee rounded up (fees.service) and what reaches available (amount); stale_price, min_amount, insufficient_available (shares) and limit_exceeded (the vault\'s instant buffer cannot cover it) as for the redemption itself.',
        }),
      },
    )
    .get('/quotes/:id', ({ params, principal }) => service.getQuote(deps, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Quote,
      detail: apiDoc('Read a quote', 'Quotes'),
    })
}
