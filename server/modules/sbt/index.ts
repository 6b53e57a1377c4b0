import { readFileSync } from 'node:fs'
import type { Database } from '../../../db/client.ts'
import type { Config } from '../../config.ts'
import type { UrlPolicy } from '../../lib/url-policy.ts'
import { SandboxChainReader, type ChainReader } from './chain-reader.ts'
import { ClaimService } from './claims.ts'
import { CredentialService } from './credentials.ts'
import { SandboxMintChain } from './mint-chain.ts'
import { sbtOpenApi } from './model.ts'
import { sbtOpsRoutes } from './ops-routes.ts'
import { SbtReads } from './reads.ts'
import { sbtListenerApp } from './routes.ts'
import { sbtEnvironmentOf, SbtTokens } from './tokens.ts'
import { WalletAuth } from './user-auth.ts'

export type SbtConfig = Pick<Config, 'serviceEnv' | 'host' | 'sbtPort' | 'sbtReferralBaseUrl' | 'sbtVerifyTimeoutMs' | 'allowLoopbackWebhooks' | 'webhookCaFile' | 'depositKeySeedHex'>

export interface SbtModuleDeps {
  db: Database
  config: SbtConfig
  /** Wall-clock milliseconds (tests pin it). */
  nowMs: () => number
  /** The chain the on-chain verifiers and the claim check read; the sandbox chain (Postgres) by default. */
  chainReader?: ChainReader
  log?: (line: string) => void
}

/** Request bodies of the SBT listener are small JSON objects. */
const SBT_BODY_LIMIT_BYTES = 64 * 1024

/**
 * The SBT data API (docs/sbt.md): its own listener (`SBT_PORT`) with the contract's paths, and
 * its operator routes for the main listener's /ops/v1.
 */
export function createSbtModule(deps: SbtModuleDeps) {
  const { db, config, nowMs } = deps
  const environment = sbtEnvironmentOf(config.serviceEnv)
  const sandbox = config.serviceEnv === 'sandbox'
  const policy: UrlPolicy = { allowLoopback: config.allowLoopbackWebhooks }
  const chain = deps.chainReader ?? new SandboxChainReader(db)
  const tokens = new SbtTokens(db, environment, nowMs)
  const reads = new SbtReads(db, config.sbtReferralBaseUrl)
  const wallets = new WalletAuth(db, nowMs)
  const credentials = new CredentialService({
    db,
    chain,
    verifyApi: { policy, timeoutMs: config.sbtVerifyTimeoutMs, ca: config.webhookCaFile ? readFileSync(config.webhookCaFile) : undefined, nowMs },
  })
  // Production builds no mint until a real chain adapter is configured: it never pretends to mint.
  const mints = sandbox ? new SandboxMintChain(config.depositKeySeedHex) : undefined
  const claims = new ClaimService(db, chain, mints, nowMs)
  const openapi = sbtOpenApi(environment)
  const app = sbtListenerApp({ tokens, reads, wallets, credentials, claims, sandbox, openapi: () => openapi, log: deps.log ?? ((line) => console.error(line)) })
  const routes = sbtOpsRoutes({ db, tokens, policy, sandbox })
  let listening = false
  return {
    routes,
    app,
    tokens,
    mints,
    /** Listens on `SBT_PORT` (0: any free port); answers the port. */
    start(port: number = config.sbtPort): number {
      app.listen({ port, hostname: config.host, maxRequestBodySize: SBT_BODY_LIMIT_BYTES, reusePort: false })
      listening = true
      return app.server!.port!
    },
    async stop(): Promise<void> {
      if (!listening) return
      listening = false
      await app.stop(true)
    },
  }
}

export type SbtModule = ReturnType<typeof createSbtModule>
