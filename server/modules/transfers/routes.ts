import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { CreateTransferBody, ListTransfersQuery, Transfer, TransferList } from './model.ts'
import * as service from './service.ts'

export function transfersRoutes(deps: service.TransfersDeps, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/transfers', prefix: '/v1' })
    .use(access)
    .post(
      '/transfers',
      (context) => context.answerInCommit(context, 201, () => service.createTransfer(deps, context.principal.orgId, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateTransferBody,
        response: { 201: Transfer },
        detail: apiDoc('Move value between two accounts', 'Transfers', {
          description:
            'Synchronous: answers 201 with state completed once the movement is durable. The fee (bps plus a fixed part, per asset) goes to the organization\'s fee account and is itemized. With holdId the transfer is paid from that pending hold and the rest of the hold returns to available. Errors: insufficient_available, account_frozen, min_amount, limit_exceeded, unsupported_asset, hold_not_active, hold_expired.',
        }),
      },
    )
    .get('/transfers', ({ query, principal }) => service.listTransfers(deps, principal.orgId, query), {
      access: 'secret',
      query: ListTransfersQuery,
      response: TransferList,
      detail: apiDoc('List transfers', 'Transfers', { description: 'Ordered by creation. Pass the last id of a page as `after` for the next page.' }),
    })
    .get('/transfers/:id', ({ params, principal }) => service.getTransfer(deps, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Transfer,
      detail: apiDoc('Read a transfer', 'Transfers'),
    })
}
