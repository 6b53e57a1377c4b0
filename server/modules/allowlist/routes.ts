import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { AllowlistEntry, AllowlistEntryList, CreateAllowlistEntryBody, ListAllowlistQuery } from './model.ts'
import * as service from './service.ts'
import type { AllowlistContext } from './service.ts'

const RULES_DOC =
  'A withdrawal can only name an active entry of its own account. An entry is registered (in its timelock) for 24 h after registration on the organization\'s clock, then active (event treasury.allowlist.activated with id, accountId, address). Addresses are validated strictly per network (invalid_request naming address) and screened (screening_rejected, nothing stored; partner_unavailable when screening cannot decide).'

export function allowlistRoutes(allowlist: AllowlistContext, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/allowlist', prefix: '/v1' })
    .use(access)
    .post(
      '/accounts/:id/allowlist',
      async ({ params, body, principal, set }) => {
        const { entry, created } = await service.registerEntry(allowlist, principal.orgId, params.id, body)
        set.status = created ? 201 : 200
        return entry
      },
      {
        access: 'secret',
        params: IdParams,
        body: CreateAllowlistEntryBody,
        response: { 200: AllowlistEntry, 201: AllowlistEntry },
        detail: apiDoc('Register a withdrawal destination', 'Allowlist', {
          description: `Answers 201 with a new registered entry, or 200 with the account's existing entry for the same network and address (its timelock is not restarted). ${RULES_DOC}`,
        }),
      },
    )
    .get('/accounts/:id/allowlist', ({ params, query, principal }) => service.listEntries(allowlist, principal.orgId, params.id, query), {
      access: 'secret',
      params: IdParams,
      query: ListAllowlistQuery,
      response: AllowlistEntryList,
      detail: apiDoc("List an account's allowlist", 'Allowlist', { description: 'Removed entries included. Ordered by creation; pass the last id of a page as after for the next.' }),
    })
    .get('/allowlist/:id', ({ params, principal }) => service.getEntry(allowlist, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: AllowlistEntry,
      detail: apiDoc('Read an allowlist entry', 'Allowlist', { description: RULES_DOC }),
    })
    .delete('/allowlist/:id', ({ params, principal }) => service.removeEntry(allowlist, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: AllowlistEntry,
      detail: apiDoc('Remove an allowlist entry', 'Allowlist', {
        description: 'New withdrawals can no longer name it (conflict); withdrawals already made continue. Removing a removed entry answers it unchanged. Event treasury.allowlist.removed.',
      }),
    })
}
