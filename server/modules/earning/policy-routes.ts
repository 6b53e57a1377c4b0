import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { reportCsv, type Accruals } from './accruals.ts'
import { AccrualList, AccrualQuery, SavePolicy, SavePolicyBody, YieldReport, YieldReportQuery } from './policy-model.ts'
import type { SavePolicies } from './save-policy.ts'

/** Save policies, accruals and yield reports. */
export function earningPolicyRoutes(policies: SavePolicies, accruals: Accruals, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/earning-policy', prefix: '/v1' })
    .use(access)
    .put('/accounts/:id/save-policy', ({ params, body, principal }) => policies.put(principal.orgId, params.id, body), {
      access: 'secret',
      params: IdParams,
      body: SavePolicyBody,
      response: SavePolicy,
      detail: apiDoc('Set the account\'s save policy', 'Earning', {
        description:
          'Once a day (the organization\'s UTC date), what the account\'s available balance holds above buffer is subscribed into vaultId: an ordinary subscription whose transaction.deposit.confirmed carries madeBy: save_policy. A paused vault, a stale price, an amount under the vault\'s minimum or a frozen account skips the day with account.save_policy.skipped naming the reason. Each account runs at most once a day. Replaces any earlier policy. Errors: not_found (account, vaultId), invalid_request (buffer).',
      }),
    })
    .get('/accounts/:id/save-policy', ({ params, principal }) => policies.get(principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: SavePolicy,
      detail: apiDoc('Read the account\'s save policy and its latest runs', 'Earning'),
    })
    .get('/accounts/:id/accruals', ({ params, query, principal }) => accruals.list(principal.orgId, params.id, query), {
      access: 'secret',
      params: IdParams,
      query: AccrualQuery,
      response: AccrualList,
      detail: apiDoc('List the account\'s accruals', 'Earning', {
        description:
          'One row per vault and day (UTC on the vaults\' clock) in which the account held shares, by day then vault; filters vaultId, from, to (dates, inclusive). Pass the last id of a page as after for the next. netYield is what the price moves added to the shares held, rounded up to the minor unit; platformFee = net × bps ÷ (10000 − bps) rounded down (none on a loss); grossYield = netYield + platformFee exactly.',
      }),
    })
    .get(
      '/yield-reports',
      async ({ query, principal, request }) => {
        const report = await accruals.report(principal.orgId, query)
        if ((request.headers.get('accept') ?? '').includes('text/csv')) return new Response(reportCsv(report), { headers: { 'content-type': 'text/csv; charset=utf-8' } }) as never
        return report
      },
      {
        access: 'secret',
        query: YieldReportQuery,
        response: YieldReport,
        detail: apiDoc('A yield report', 'Earning', {
          description:
            'Per account and vault, the sums of the accrual rows from from to to (inclusive, at most 366 days), optionally for one accountId or vaultId: each total is the exact sum of its rows. JSON, or CSV with Accept: text/csv (one line per account and vault).',
        }),
      },
    )
}
