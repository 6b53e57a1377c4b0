import { Elysia } from 'elysia'
import type { Config } from './config.ts'
import { createLedgerOpsModule } from './modules/ledger-ops/routes.ts'
import { createAccountsModule } from './modules/accounts/index.ts'
import { createAllowlistModule } from './modules/allowlist/index.ts'
import { assetsRoutes } from './modules/assets/routes.ts'
import { createChainModule } from './modules/chain/index.ts'
import { createDepositsModule, type DepositsModule } from './modules/deposits/index.ts'
import { createBalancesModule } from './modules/balances/index.ts'
import { createHoldRecords, createHoldsModule, type HoldsModule } from './modules/holds/index.ts'
import { createPaymentsModule, type PaymentsModule } from './modules/payments/index.ts'
import { createEventsModule } from './modules/events/index.ts'
import { createWebhooksModule, type WebhooksModule } from './modules/webhooks/index.ts'
import { createEarningModule, type EarningModuleDeps } from './modules/earning/index.ts'
import { createVaultsModule } from './modules/vaults/index.ts'
import { createQuotesModule } from './modules/quotes/index.ts'
import { createOperatorModule } from './modules/operator/module.ts'
import { createOrgsModule } from './modules/orgs/index.ts'
import { createSandboxModule } from './modules/sandbox/index.ts'
import { createStatementsModule, type StatementsModule } from './modules/statements/index.ts'
import { createTransfersModule } from './modules/transfers/index.ts'
import { createSbtModule } from './modules/sbt/index.ts'
import { createWithdrawalsModule, type WithdrawalsModule } from './modules/withdrawals/index.ts'
import { accessPlugin, recordIdempotentFailure } from './platform/access.ts'
import { arrivalPlugin } from './platform/arrival.ts'
import { apiKeyAuthPlugin, operatorAuthPlugin } from './platform/auth.ts'
import { jsonBodyPlugin, requestShapePlugin } from './platform/body.ts'
import { errorsPlugin } from './platform/errors.ts'
import { IdempotencyStore } from './platform/idempotency.ts'
import { ownersOf } from './platform/idempotency-owners.ts'
import { operatorIdempotency } from './platform/operator-idempotency.ts'
import { openapiPlugin } from './platform/openapi.ts'
import { internalRequests } from './cluster/forward.ts'
import type { ClusterNode } from './cluster/index.ts'
import { clusterGatePlugin, gatedFront } from './cluster/plugin.ts'
import { closeRuntime, createRuntime, type Runtime, type RuntimeOptions } from './runtime.ts'

const IDEMPOTENCY_PURGE_INTERVAL_MS = 15 * 60 * 1000

export async function buildApp(runtime: Runtime) {
  const idempotency = new IdempotencyStore(runtime.db, () => runtime.clock.wallNowMs(), ownersOf(runtime.database))
  const purge = setInterval(() => void idempotency.purgeExpired().catch(() => {}), IDEMPOTENCY_PURGE_INTERVAL_MS)
  purge.unref()
  runtime.stoppers.push(() => clearInterval(purge))
  const access = accessPlugin(idempotency, { testExitAfterCommit: runtime.config.testExitAfterCommit })
  const statements = createStatementsModule({ db: runtime.db, ledger: runtime.ledger, clock: runtime.clock, access, config: runtime.config })
  runtime.stoppers.unshift(() => statements.stop())
  const { db, ledger, clock, screening } = runtime
  // Organizations, accounts, webhooks and the event log; the webhook worker starts in createApp.
  const orgs = createOrgsModule({ db, keys: runtime.keys, clock, idempotency })
  const accounts = createAccountsModule({ db, ledger, clock, access })
  const webhooks = createWebhooksModule({ db, database: runtime.database, clock, access, config: runtime.config })
  const events = createEventsModule({ db, clock, access, kickDelivery: webhooks.kickDelivery })
  // Money out: the allowlist names the destinations, the organization sets the approval threshold,
  // the chain adapter sends. Money in: deposits record the arrivals the chain (simulator) reports.
  const allowlist = createAllowlistModule({ db, ledger, clock, screening, access })
  const withdrawals = createWithdrawalsModule({
    db,
    ledger,
    clock,
    chain: runtime.chain,
    screening,
    requireActiveEntry: allowlist.requireActiveEntry,
    approvalThresholdMinor: orgs.approvalThresholdMinor,
    access,
    ownedOrganizations: runtime.cluster?.ownedOrganizations,
  })
  const deposits = createDepositsModule({ db, ledger, clock, addresses: runtime.addresses, access, idempotency, ownedOrganizations: runtime.cluster?.ownedOrganizations })
  const chain = createChainModule({ chain: runtime.chain, clock, access, arrivals: deposits.arrivals })
  const operator = createOperatorModule({ db, clock, screening, operatorToken: runtime.operatorToken, idempotency, withdrawals: withdrawals.operatorActions })
  // Operator writes outside the operator module (vaults, cycles) keep their keys in the same space.
  const opsIdempotency = operatorIdempotency(idempotency, operator.service.tokenFingerprint)
  // ...and are recorded in the operator audit trail with their changes.
  const audit = operator.service.audit
  // Earning (vaults): the catalog and its venue, then the intents that settle in its cycles.
  // Off (no routes) where no venue is configured: production until a venue adapter exists.
  const vaults =
    runtime.config.vaultVenue === 'sandbox' ? await createVaultsModule({ db: runtime.db, wallNowMs: () => runtime.clock.wallNowMs(), venue: 'sandbox', access, opsIdempotency, audit }) : undefined
  const earning =
    vaults === undefined
      ? undefined
      : createEarningModule({
          db: runtime.db,
          ledger: runtime.ledger,
          clock: runtime.clock,
          vaults,
          access,
          opsIdempotency,
          audit,
          workerIntervalMs: runtime.config.earningWorkerIntervalMs,
          crashPoint: runtime.config.crashPoint,
          // A cycle's part is asked of its organization's owner through the whole server, the gate first.
          cluster:
            runtime.cluster === undefined || runtime.config.cluster === undefined
              ? undefined
              : earningInCluster(runtime.cluster, runtime.operatorToken, internalRequests(runtime.config.cluster.secret, () => (request) => app.handle(request))),
        })
  // The SBT data API: its operator routes join /ops/v1 here; its own listener is started by main.ts.
  const sbt = createSbtModule({ db: runtime.db, config: runtime.config, nowMs: () => runtime.clock.wallNowMs() })
  runtime.stoppers.push(() => sbt.stop())
  // Money between accounts: the holds' records come first (transfers pay from pending holds, and a
  // hold's capture is a transfer), then payments, which own the holds of their authorizations and
  // register with the holds module as their owner (how to read one, and what a lapse adds to its
  // expiry) before the hold sweep starts below.
  const holdRecords = createHoldRecords({ db, ledger, clock })
  const transfers = createTransfersModule({ db, ledger, clock, holds: holdRecords, access })
  const holds = createHoldsModule({ ledger, clock, access, records: holdRecords, transfers: transfers.executor })
  const payments = createPaymentsModule({
    db,
    ledger,
    clock,
    access,
    idempotency,
    auth: { keys: runtime.keys, clock, rateLimiter: runtime.rateLimiter, operatorToken: runtime.operatorToken },
    shedder: () => runtime.shedder,
    loopLag: runtime.loopLag,
    holds,
    config: { bodyLimitBytes: runtime.config.bodyLimitBytes, slowAuthorizationMs: runtime.config.slowAuthorizationMs, slowAuthorizationsKept: runtime.config.slowAuthorizationsKept },
  })
  // Its fail-closed retries stop and its queued decline records are written before the ledger drains.
  runtime.stoppers.unshift(() => payments.stop())
  const balances = createBalancesModule({ ledger, clock, access, allocations: earning?.allocations })
  const quotes = createQuotesModule({ db, ledger, clock, access, instantRedeem: earning?.quoteInstantRedeem })
  const ledgerOps = createLedgerOpsModule({ db, ledger, clock, loopLag: runtime.loopLag, config: { groupCommit: runtime.config.groupCommit } })
  // Authorizations are answered in front of the app, before Elysia's router and request hooks,
  // the load shedder first: Bun's router sends them there (`serve.routes`, which a listening app
  // gives Bun beside Elysia's own), and what the front does not answer (a caller without a secret
  // key) goes on to the app. In cluster mode the gate comes before it: a partner request for an
  // organization another server owns is forwarded there before this server looks at it
  // (docs/scale-out.md, "Cluster mode").
  const gate = runtime.cluster?.gate
  const front = gatedFront(
    payments.front((request): Response | Promise<Response> => app.fetch(request)),
    gate,
  )
  let app = new Elysia({ name: 'kassa', normalize: false, serve: { routes: front.routes } })
    .use(clusterGatePlugin(gate))
    .use(arrivalPlugin())
    .use(errorsPlugin({ onErrorResponse: (request, error, response) => recordIdempotentFailure(idempotency, request, error, response) }))
    .use(jsonBodyPlugin(runtime.config.bodyLimitBytes))
    .use(operatorAuthPlugin(runtime))
    .use(apiKeyAuthPlugin(runtime))
    .use(requestShapePlugin())
    .use(openapiPlugin())
    .get('/health', () => ({ status: 'ok', environment: runtime.config.serviceEnv }), { detail: { hide: true } })
    .use(orgs.opsRoutes)
    .use(assetsRoutes(access))
    .use(accounts.routes)
    .use(ledgerOps.opsRoutes)
    .use(balances.routes)
    .use(holds.routes)
    .use(transfers.routes)
    .use(quotes.routes)
    .use(payments.routes)
    .use(payments.opsRoutes)
    .use(deposits.routes)
    .use(deposits.opsRoutes)
    .use(allowlist.routes)
    .use(withdrawals.routes)
    .use(withdrawals.opsRoutes(operator.service))
    .use(webhooks.routes)
    .use(events.routes)
    .use(events.opsRoutes)
    .use(statements.routes)
    .use(statements.opsRoutes)
    .use(statements.publicRoutes)
    .use(sbt.routes)
    .use(operator.routes)
  if (vaults !== undefined && earning !== undefined) {
    app = app.use(vaults.routes).use(vaults.opsRoutes).use(earning.routes).use(earning.policyRoutes).use(earning.opsRoutes) as unknown as typeof app
    earning.start()
    runtime.stoppers.push(() => earning.stop())
  }
  if (runtime.config.serviceEnv === 'sandbox') {
    const sandbox = createSandboxModule({ db, clock, access })
    app = app.use(sandbox.routes).use(balances.sandboxRoutes).use(chain.sandboxRoutes) as unknown as typeof app
  }
  // The authorized payments' holds are back in memory before the sweep that expires holds starts.
  await payments.start()
  holds.start()
  runtime.stoppers.push(() => holds.stop())
  allowlist.start()
  runtime.stoppers.push(() => allowlist.stop())
  // The outcome listener is registered before the chain starts delivering outcomes.
  withdrawals.start()
  runtime.stoppers.push(() => withdrawals.stop())
  chain.start()
  runtime.stoppers.push(() => chain.stop())
  deposits.start()
  runtime.stoppers.push(() => deposits.stop())
  return { app, handle: front.handle, statements, sbt, earning, payments, holds, deposits, withdrawals, webhooks }
}

/**
 * Earning in a cluster (docs/scale-out.md, "Earning in a cluster"): a cycle's organizations' parts
 * are asked of their owners through the gate; each server runs its own organizations' save
 * policies; the owner of partition 0 does the platform-wide work.
 */
function earningInCluster(cluster: ClusterNode, operatorToken: string, internal: ReturnType<typeof internalRequests>): EarningModuleDeps['cluster'] {
  return {
    async parts(cycleId, orgId) {
      const response = await internal.post(`/ops/v1/vault-cycles/${encodeURIComponent(cycleId)}/parts/${encodeURIComponent(orgId)}`, { authorization: `Bearer ${operatorToken}` })
      if (response.status === 200) return
      const body = (await response.json().catch(() => undefined)) as { error?: { code?: string; message?: string } } | undefined
      throw new Error(`${response.status} ${body?.error?.code ?? ''}: ${body?.error?.message ?? ''}`)
    },
    partsAccess: internal,
    ownedOrganizations: cluster.ownedOrganizations,
    platformWork: () => cluster.leases.serves(0),
  }
}

export type App = Awaited<ReturnType<typeof buildApp>>['app']
export type EarningModule = ReturnType<typeof createEarningModule>

export interface Kassa {
  app: App
  /** The SBT data API: `sbt.start()` opens its listener, `sbt.app.handle` answers in process. */
  sbt: Awaited<ReturnType<typeof buildApp>>['sbt']
  runtime: Runtime
  /** Sealed daily statements (its sealer's `runOnce()` is what tests drive). */
  statements: StatementsModule
  /** Payments: `configure` (tests set the budget), `declines`, `stats`, and the holds of organizations taken in cluster mode. */
  payments: PaymentsModule
  /** Holds: `expiry.runOnce()` is one pass of the expiry sweep (tests drive it). */
  holds: HoldsModule
  /** Earning's services and its worker step (undefined when earning is off). */
  earning: EarningModule | undefined
  /** Deposits: the sweep's steps and the suspense actions, as tests drive them. */
  deposits: DepositsModule
  /** Withdrawals: outcomes and broadcast passes, as tests drive them. */
  withdrawals: WithdrawalsModule
  /** Webhooks: `webhooks.delivery?.worker.runOnce()` is the delivery pass tests drive. */
  webhooks: WebhooksModule
  /**
   * One request through the app as a listening server answers it, the load shedder in front
   * included (`app.handle` alone starts at Elysia's router, behind the shedder).
   */
  handle(request: Request): Promise<Response>
  close(): Promise<void>
}

/** Builds the whole service for a config; only `server/main.ts` listens. */
export async function createApp(config: Config, options: RuntimeOptions = {}): Promise<Kassa> {
  const runtime = await createRuntime(config, options)
  const { app, handle, statements, sbt, earning, payments, holds, deposits, withdrawals, webhooks } = await buildApp(runtime)
  await statements.start()
  // Delivery runs beside the request path and never inside it: requests only write events.
  await webhooks.start()
  runtime.stoppers.push(() => webhooks.stop())
  return {
    app,
    sbt,
    runtime,
    statements,
    earning,
    payments,
    holds,
    deposits,
    withdrawals,
    webhooks,
    handle: async (request) => handle(request),
    async close() {
      if (app.server) await app.stop()
      await closeRuntime(runtime)
    },
  }
}
