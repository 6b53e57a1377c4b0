import { Elysia } from 'elysia'
import type { Config } from './config.ts'
import { createLedgerOpsModule } from './modules/ledger-ops/routes.ts'
import { accountsRoutes } from './modules/accounts/routes.ts'
import { allowlistRoutes } from './modules/allowlist/routes.ts'
import { startAllowlistActivation } from './modules/allowlist/service.ts'
import { assetsRoutes } from './modules/assets/routes.ts'
import { sandboxChainRoutes } from './modules/chain/routes.ts'
import { startChain } from './modules/chain/service.ts'
import { depositsRoutes, suspenseOpsRoutes } from './modules/deposits/routes.ts'
import { startDeposits } from './modules/deposits/service.ts'
import { createBalancesModule } from './modules/balances/index.ts'
import { createHoldRecords, createHoldsModule, type HoldsModule } from './modules/holds/index.ts'
import { createPaymentsModule, type PaymentsModule } from './modules/payments/index.ts'
import { eventsOpsRoutes, eventsRoutes } from './modules/events/routes.ts'
import { webhooksRoutes } from './modules/webhooks/routes.ts'
import { createEarningModule } from './modules/earning/index.ts'
import { createVaultsModule } from './modules/vaults/index.ts'
import { startWebhookDelivery } from './modules/webhooks/worker.ts'
import { createQuotesModule } from './modules/quotes/index.ts'
import { createOperatorModule } from './modules/operator/module.ts'
import { orgsOpsRoutes } from './modules/orgs/routes.ts'
import { sandboxRoutes } from './modules/sandbox/routes.ts'
import { createStatementsModule, type StatementsModule } from './modules/statements/index.ts'
import { createTransfersModule } from './modules/transfers/index.ts'
import { withdrawalsOpsRoutes, withdrawalsRoutes } from './modules/withdrawals/routes.ts'
import { createSbtModule } from './modules/sbt/index.ts'
import { startWithdrawals } from './modules/withdrawals/service.ts'
import { accessPlugin, recordIdempotentFailure } from './platform/access.ts'
import { arrivalPlugin } from './platform/arrival.ts'
import { apiKeyAuthPlugin, operatorAuthPlugin } from './platform/auth.ts'
import { jsonBodyPlugin, requestShapePlugin } from './platform/body.ts'
import { errorsPlugin } from './platform/errors.ts'
import { IdempotencyStore, ownersOf } from './platform/idempotency.ts'
import { operatorIdempotency } from './platform/operator-idempotency.ts'
import { openapiPlugin } from './platform/openapi.ts'
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
  const operator = createOperatorModule({ runtime, idempotency })
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
        })
  // The SBT data API: its operator routes join /ops/v1 here; its own listener is started by main.ts.
  const sbt = createSbtModule({ db: runtime.db, config: runtime.config, nowMs: () => runtime.clock.wallNowMs() })
  runtime.stoppers.push(() => sbt.stop())
  // Money between accounts: the holds' records come first (transfers pay from pending holds, and a
  // hold's capture is a transfer), then payments, which own the holds of their authorizations and
  // register with the holds module as their owner (how to read one, and what a lapse adds to its
  // expiry) before the hold sweep starts below.
  const { db, ledger, clock } = runtime
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
  // key) goes on to the app.
  const front = payments.front((request) => app.fetch(request))
  let app = new Elysia({ name: 'kassa', normalize: false, serve: { routes: front.routes } })
    .use(arrivalPlugin())
    .use(errorsPlugin({ onErrorResponse: (request, error, response) => recordIdempotentFailure(idempotency, request, error, response) }))
    .use(jsonBodyPlugin(runtime.config.bodyLimitBytes))
    .use(operatorAuthPlugin(runtime))
    .use(apiKeyAuthPlugin(runtime))
    .use(requestShapePlugin())
    .use(openapiPlugin())
    .get('/health', () => ({ status: 'ok', environment: runtime.config.serviceEnv }), { detail: { hide: true } })
    .use(orgsOpsRoutes(runtime, idempotency))
    .use(assetsRoutes(access))
    .use(accountsRoutes(runtime, access))
    .use(ledgerOps.opsRoutes)
    .use(balances.routes)
    .use(holds.routes)
    .use(transfers.routes)
    .use(quotes.routes)
    .use(payments.routes)
    .use(payments.opsRoutes)
    .use(depositsRoutes(runtime, access))
    .use(suspenseOpsRoutes(runtime, idempotency))
    .use(allowlistRoutes(runtime, access))
    .use(withdrawalsRoutes(runtime, access))
    .use(withdrawalsOpsRoutes(runtime, operator.service))
    .use(webhooksRoutes(runtime, access))
    .use(eventsRoutes(runtime, access))
    .use(eventsOpsRoutes(runtime))
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
    app = app.use(sandboxRoutes(runtime, access)).use(balances.sandboxRoutes).use(sandboxChainRoutes(runtime, access)) as unknown as typeof app
  }
  // The authorized payments' holds are back in memory before the sweep that expires holds starts.
  await payments.start()
  holds.start()
  runtime.stoppers.push(() => holds.stop())
  startAllowlistActivation(runtime)
  // The outcome listener is registered before the chain starts delivering outcomes.
  startWithdrawals(runtime)
  startChain(runtime)
  startDeposits(runtime)
  return { app, handle: front.handle, statements, sbt, earning, payments, holds }
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
  /** Payments: `configure` (tests set the budget), `declines`, `stats`. */
  payments: PaymentsModule
  /** Holds: `expiry.runOnce()` is one pass of the expiry sweep (tests drive it). */
  holds: HoldsModule
  /** Earning's services and its worker step (undefined when earning is off). */
  earning: EarningModule | undefined
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
  const { app, handle, statements, sbt, earning, payments, holds } = await buildApp(runtime)
  await statements.start()
  // Delivery runs beside the request path and never inside it: requests only write events.
  await startWebhookDelivery(runtime)
  return {
    app,
    sbt,
    runtime,
    statements,
    earning,
    payments,
    holds,
    handle: async (request) => handle(request),
    async close() {
      if (app.server) await app.stop()
      await closeRuntime(runtime)
    },
  }
}
