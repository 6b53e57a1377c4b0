import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import { findAsset } from '../../lib/assets.ts'
import type { Clock } from '../clock/clock.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { jwksRoutes, statementsOpsRoutes, statementsRoutes } from './routes.ts'
import { StatementSealer } from './sealer.ts'
import { StatementsService } from './service.ts'
import { StatementKeyRing } from './signing.ts'

export interface StatementsModuleDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  access: AccessPlugin
  config: {
    /** How long after a cut-off its date is sealed (`STATEMENT_SETTLE_SECONDS`). */
    statementSettleSeconds: number
    /** How often the sealer runs (`STATEMENT_SEAL_INTERVAL_SECONDS`); 0 runs it only when called. */
    statementSealIntervalSeconds: number
  }
}

/**
 * Sealed daily statements: the sealer (a background pass with `runOnce()`), the signing keys and
 * their JWKS, the read routes and the operator routes. `start` loads the keys (making the first one)
 * and starts the periodic pass; `stop` ends it.
 */
export function createStatementsModule(deps: StatementsModuleDeps) {
  const keys = new StatementKeyRing(deps.db, () => new Date(deps.clock.wallNowMs()))
  const sealer = new StatementSealer({
    db: deps.db,
    nowMs: (orgId) => deps.clock.nowMs(orgId),
    drainLedger: () => deps.ledger.drain(),
    keys,
    settleMs: deps.config.statementSettleSeconds * 1000,
    decimalsOf: (asset) => findAsset(asset)?.decimals,
  })
  const service = new StatementsService({
    db: deps.db,
    requireAccount: (orgId, accountId) => deps.ledger.accounts.require(orgId, accountId),
    nowMs: (orgId) => deps.clock.nowMs(orgId),
  })
  let timer: ReturnType<typeof setInterval> | undefined
  let running: Promise<unknown> | undefined

  return {
    service,
    sealer,
    keys,
    routes: statementsRoutes(service, deps.access),
    publicRoutes: jwksRoutes(keys),
    opsRoutes: statementsOpsRoutes(service, keys),
    async start(): Promise<void> {
      await keys.load()
      const intervalMs = deps.config.statementSealIntervalSeconds * 1000
      if (intervalMs === 0) return
      timer = setInterval(() => {
        if (running) return
        running = sealer
          .runOnce()
          .catch((error: unknown) => console.error('statements: a sealing pass failed; the next pass retries', error))
          .finally(() => (running = undefined))
      }, intervalMs)
      timer.unref()
    },
    async stop(): Promise<void> {
      if (timer) clearInterval(timer)
      timer = undefined
      await running
    },
  }
}

export type StatementsModule = ReturnType<typeof createStatementsModule>
