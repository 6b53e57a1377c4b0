import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { requireTestKey } from '../sandbox/routes.ts'
import { AccountBalances, FundBody, Funding } from './model.ts'
import * as service from './service.ts'

export function balancesRoutes(deps: service.BalancesDeps, access: AccessPlugin, allocations?: service.AllocationSource) {
  return new Elysia({ name: 'kassa/balances', prefix: '/v1' })
    .use(access)
    .get('/accounts/:id/balances', ({ params, principal }) => service.getBalances(deps, principal.orgId, params.id, allocations), {
      access: 'secret',
      params: IdParams,
      response: AccountBalances,
      detail: apiDoc('Read an account\'s balances', 'Balances', {
        description:
          'One entry per supported asset. Always total = available + held + inFlight + sum(allocations.value). Held is reserved by pending holds; inFlight carries subscriptions waiting for their cycle and claimable redemption proceeds; allocations are vault positions valued at the current share price, rounded down.',
      }),
    })
}

/** Registered with the other sandbox helpers, so production answers 404. */
export function sandboxFundingRoutes(deps: service.BalancesDeps, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/sandbox-funding', prefix: '/v1/sandbox' }).use(access).post(
    '/accounts/:id/fund',
    (context) => {
      requireTestKey(context.principal)
      return context.answerInCommit(context, 201, () => service.fundFromFaucet(deps, context.principal.orgId, context.params.id, context.body))
    },
    {
      access: { level: 'secret', idempotency: 'commit' },
      params: IdParams,
      body: FundBody,
      response: { 201: Funding },
      detail: apiDoc('Credit an account from the sandbox faucet', 'Sandbox', {
        description: 'Test keys only. A real double-entry movement from the organization\'s faucet account, so balances and verify behave as with deposits.',
      }),
    },
  )
}
