import { Elysia, t } from 'elysia'
import type { AccessPlugin } from '../../platform/access.ts'
import type { OperatorIdempotencyPlugin } from '../../platform/operator-idempotency.ts'
import { apiDoc } from '../../platform/openapi.ts'
import type { VaultClock } from './clock.ts'
import { AdvanceBody, CreateVaultBody, OperatorActBody, SetNavBody, UpdateVaultBody, Vault, VaultIdParams, VaultList, VaultPrice } from './model.ts'
import { toVaultView, type AuditOperatorAction, type VaultCatalog } from './service.ts'

const ops = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

/** The public catalog: readable without a key. */
export function vaultsPublicRoutes(catalog: VaultCatalog, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/vaults', prefix: '/v1' })
    .use(access)
    .get('/vaults', async () => ({ vaults: (await catalog.list()).map(toVaultView) }), {
      access: 'public',
      response: VaultList,
      detail: apiDoc('Vault catalog', 'Earning', { security: 'public', description: 'Readable without a key. Every vault with its terms and state.' }),
    })
    .get('/vaults/:id', async ({ params }) => toVaultView(await catalog.require(params.id)), {
      access: 'public',
      params: VaultIdParams,
      response: Vault,
      detail: apiDoc('One vault with its terms', 'Earning', { security: 'public' }),
    })
    .get('/vaults/:id/price', ({ params }) => catalog.priceView(params.id), {
      access: 'public',
      params: VaultIdParams,
      response: VaultPrice,
      detail: apiDoc('A vault\'s share price, normalized price and apy', 'Earning', {
        security: 'public',
        description:
          'Readable without a key. sharePrice is the latest price the venue reported (asOf). apy is a fraction net of the platform fee, from the trailing 7 days compounded over a year: (p_now / p_7_days_ago)^(365/7) - 1; null until the vault has 7 days of price history. stale is true once the price is older than the vault\'s priceMaxAgeSeconds; subscriptions and instant redemptions then answer stale_price.',
      }),
    })
}

const AUDIT_DOC =
  'Recorded in the operator audit trail (GET /ops/v1/operator-actions) with the operator named (body operator, "operator" when left out) and the fingerprint of the token used, and emitted as a platform-wide operator.action event, in the same commit as the change; a repeat that changes nothing is recorded too (detail.changed false), a refusal with its error code and no event.'

/** Operators manage the catalog (under /ops/v1, operator token); every POST honours Idempotency-Key. */
export function vaultsOpsRoutes(catalog: VaultCatalog, clock: VaultClock, sandbox: boolean, idempotent: OperatorIdempotencyPlugin, audit: AuditOperatorAction) {
  const setState = (vaultId: string, state: 'active' | 'paused', operator: string | undefined) =>
    audit({ operator: operator ?? 'operator', action: state === 'paused' ? 'vault.pause' : 'vault.unpause', targetId: vaultId, orgId: null, detail: {} }, (alongside) =>
      catalog.setState(vaultId, state, alongside),
    )
  let routes = new Elysia({ name: 'kassa/ops-vaults', prefix: '/ops/v1' })
    .use(idempotent)
    .post(
      '/vaults',
      async ({ body, set }) => {
        set.status = 201
        return catalog.create(body)
      },
      { body: CreateVaultBody, response: { 201: Vault }, detail: ops('Create a vault', 'Opens its first deposit and redeem cycles and records its initial price.') },
    )
    .get('/vaults', async () => ({ vaults: (await catalog.list()).map(toVaultView) }), { response: VaultList, detail: ops('List vaults') })
    .get('/vaults/:id/price', ({ params }) => catalog.priceView(params.id), {
      params: VaultIdParams,
      response: VaultPrice,
      detail: ops('A vault\'s price, for operators', 'The same view as GET /v1/vaults/{id}/price, under the operator token and its limits rather than the public rate limit (the console reads it on every refresh).'),
    })
    .patch('/vaults/:id', ({ params, body }) => catalog.update(params.id, body), {
      params: VaultIdParams,
      body: UpdateVaultBody,
      response: Vault,
      detail: ops('Change a vault\'s terms or instant-redemption buffer', 'Terms apply to intents made afterwards.'),
    })
    .post('/vaults/:id/pause', ({ params, body }) => setState(params.id, 'paused', body?.operator), {
      params: VaultIdParams,
      body: OperatorActBody,
      response: Vault,
      detail: ops('Pause a vault', 'Subscriptions and redemptions are refused (conflict); cancels and claims keep working. Sends vault.paused. ' + AUDIT_DOC + ' Honours Idempotency-Key (operator keys live apart from every organization\'s): a retry with the same key answers the first answer again.'),
    })
    .post('/vaults/:id/unpause', ({ params, body }) => setState(params.id, 'active', body?.operator), {
      params: VaultIdParams,
      body: OperatorActBody,
      response: Vault,
      detail: ops('Unpause a vault', 'Sends vault.unpaused. ' + AUDIT_DOC + ' Honours Idempotency-Key (operator keys live apart from every organization\'s): a retry with the same key answers the first answer again.'),
    })
    .post('/vaults/prices/sync', async () => ({ changed: await catalog.syncPrices() }), {
      response: t.Object({ changed: t.Integer() }),
      detail: ops('Sync every vault\'s price from the venue now', 'What the price worker does each pass; vault.price.updated for each NAV that changed.'),
    })
  if (sandbox) {
    routes = routes
      .post('/vaults/:id/nav', ({ params, body }) => catalog.setNav(params.id, body.price, body.dailyRate), {
        params: VaultIdParams,
        body: SetNavBody,
        response: VaultPrice,
        detail: ops('Set a vault\'s NAV (sandbox venue)', 'Records the price and sends vault.price.updated; growth continues daily from it.'),
      })
      .post('/vaults/clock/advance', async ({ body }) => ({ now: (await clock.advance(body.seconds)).toISOString() }), {
        body: AdvanceBody,
        response: t.Object({ now: t.String() }),
        detail: ops('Move the vaults\' clock ahead (sandbox)', 'Daily NAV growth, price freshness and cycle cadence read this clock.'),
      }) as unknown as typeof routes
  }
  return routes
}
