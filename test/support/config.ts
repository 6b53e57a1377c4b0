import { resolve } from 'node:path'
import { DELIVERY_PROCESS_NICE_DEFAULT, SANDBOX_DEPOSIT_KEY_SEED_HEX, SLOW_AUTHORIZATIONS_KEPT_DEFAULT, type Config } from '../../server/config.ts'

/** A sandbox configuration for an app built in a test or a benchmark: no listener, no background timers but the ones driven, earning on. */
export function configForTests(overrides: Partial<Config> = {}): Config {
  return {
    port: 0,
    host: '127.0.0.1',
    databaseUrl: undefined,
    dataDir: resolve('.data/test'),
    serviceEnv: 'sandbox',
    operatorToken: 'test-operator-token-0123456789abcdef0123456789',
    rateLimitStore: 'memory',
    bodyLimitBytes: 256 * 1024,
    allowLoopbackWebhooks: true,
    webhookCaFile: undefined,
    webhookDelivery: true,
    webhookDeliveryProcess: false,
    webhookDeliveryNice: DELIVERY_PROCESS_NICE_DEFAULT,
    groupCommit: true,
    ledgerPipelineDepth: 2,
    ledgerPipelineMinOperations: 1,
    loadShedding: false,
    slowAuthorizationMs: 3,
    slowAuthorizationsKept: SLOW_AUTHORIZATIONS_KEPT_DEFAULT,
    databasePoolMax: 10,
    warmUpAuthorizations: 0,
    logRequests: false,
    screeningBlocklist: [],
    depositKeySeedHex: SANDBOX_DEPOSIT_KEY_SEED_HEX,
    testExitAfterCommit: 0,
    statementSettleSeconds: 60,
    // Tests drive the sealer with runOnce().
    statementSealIntervalSeconds: 0,
    sbtPort: 0,
    sbtReferralBaseUrl: 'https://app.example.test',
    sbtVerifyTimeoutMs: 2000,
    vaultVenue: overrides.serviceEnv === 'production' ? 'off' : 'sandbox',
    earningWorkerIntervalMs: 0,
    crashPoint: undefined,
    cluster: undefined,
    ...overrides,
  }
}
