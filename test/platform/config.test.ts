import { describe, expect, test } from 'bun:test'
import { resolve } from 'node:path'
import { ConfigError, loadConfig, SANDBOX_DEPOSIT_KEY_SEED_HEX } from '../../server/config.ts'

const OPERATOR_TOKEN = 'op-token-for-config-tests-0123456789abcdef'
const DATABASE_URL = 'postgres://kassa@db.internal:5432/kassa'

function configError(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env)
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError)
    return error as ConfigError
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`)
}

describe('loadConfig', () => {
  test('gives safe sandbox defaults for an empty environment', () => {
    const config = loadConfig({})
    expect(config).toMatchObject({
      port: 3000,
      serviceEnv: 'sandbox',
      databaseUrl: undefined,
      operatorToken: undefined,
      rateLimitStore: 'memory',
      bodyLimitBytes: 256 * 1024,
      allowLoopbackWebhooks: false,
      ledgerPipelineDepth: 2,
      ledgerPipelineMinOperations: 32,
      loadShedding: true,
      slowAuthorizationMs: 3,
      slowAuthorizationsKept: 4096,
    })
    expect(config.dataDir).toBe(resolve('.data'))
  })

  test('reads every variable it knows', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '127.0.0.1',
      SERVICE_ENV: 'production',
      DATABASE_URL,
      OPERATOR_TOKEN,
      RATE_LIMIT_STORE: 'memory',
      BODY_LIMIT_BYTES: '4096',
      GROUP_COMMIT: 'false',
      DATABASE_POOL_MAX: '20',
      LEDGER_PIPELINE_DEPTH: '3',
      LEDGER_PIPELINE_MIN_OPERATIONS: '8',
      LOAD_SHEDDING: 'off',
      SLOW_AUTHORIZATION_MS: '0',
      SLOW_AUTHORIZATIONS_KEPT: '131072',
      LOG_REQUESTS: 'yes',
      DEPOSIT_KEY_SEED: 'C0'.repeat(32),
    })
    expect(config).toMatchObject({
      port: 8080,
      host: '127.0.0.1',
      serviceEnv: 'production',
      databaseUrl: DATABASE_URL,
      operatorToken: OPERATOR_TOKEN,
      rateLimitStore: 'memory',
      bodyLimitBytes: 4096,
      groupCommit: false,
      databasePoolMax: 20,
      ledgerPipelineDepth: 3,
      ledgerPipelineMinOperations: 8,
      loadShedding: false,
      slowAuthorizationMs: 0,
      slowAuthorizationsKept: 131072,
      logRequests: true,
      depositKeySeedHex: 'c0'.repeat(32),
    })
  })

  test('uses the shared Postgres rate-limit store when a database URL is given', () => {
    expect(loadConfig({ DATABASE_URL }).rateLimitStore).toBe('postgres')
  })

  test.each([
    ['a non-numeric PORT', { PORT: 'eighty' }, 'PORT'],
    ['a negative PORT', { PORT: '-1' }, 'PORT'],
    ['a PORT out of range', { PORT: '70000' }, 'PORT'],
    ['an unknown SERVICE_ENV', { SERVICE_ENV: 'staging' }, 'SERVICE_ENV'],
    ['a SERVICE_ENV in the wrong case', { SERVICE_ENV: 'Production' }, 'SERVICE_ENV'],
    ['a DATABASE_URL that is not a URL', { DATABASE_URL: 'not a url' }, 'DATABASE_URL'],
    ['a DATABASE_URL of another database', { DATABASE_URL: 'mysql://root@localhost/kassa' }, 'DATABASE_URL'],
    ['a short OPERATOR_TOKEN', { OPERATOR_TOKEN: 'short' }, 'OPERATOR_TOKEN'],
    ['an OPERATOR_TOKEN with spaces', { OPERATOR_TOKEN: 'correct horse battery staple and more words' }, 'OPERATOR_TOKEN'],
    ['an unknown RATE_LIMIT_STORE', { RATE_LIMIT_STORE: 'redis' }, 'RATE_LIMIT_STORE'],
    ['a tiny BODY_LIMIT_BYTES', { BODY_LIMIT_BYTES: '10' }, 'BODY_LIMIT_BYTES'],
    ['a non-boolean ALLOW_LOOPBACK_WEBHOOKS', { ALLOW_LOOPBACK_WEBHOOKS: 'maybe' }, 'ALLOW_LOOPBACK_WEBHOOKS'],
    ['a fractional SLOW_AUTHORIZATION_MS', { SLOW_AUTHORIZATION_MS: '2.5' }, 'SLOW_AUTHORIZATION_MS'],
    ['a SLOW_AUTHORIZATION_MS past the budget', { SLOW_AUTHORIZATION_MS: '501' }, 'SLOW_AUTHORIZATION_MS'],
    ['a SLOW_AUTHORIZATIONS_KEPT of none', { SLOW_AUTHORIZATIONS_KEPT: '0' }, 'SLOW_AUTHORIZATIONS_KEPT'],
    ['a SLOW_AUTHORIZATIONS_KEPT over a million', { SLOW_AUTHORIZATIONS_KEPT: '1000001' }, 'SLOW_AUTHORIZATIONS_KEPT'],
    ['a WEBHOOK_DELIVERY_NICE past the lowest priority', { WEBHOOK_DELIVERY_NICE: '20' }, 'WEBHOOK_DELIVERY_NICE'],
    ['a negative WEBHOOK_DELIVERY_NICE (a higher priority than the server)', { WEBHOOK_DELIVERY_NICE: '-5' }, 'WEBHOOK_DELIVERY_NICE'],
    ['a WEBHOOK_DELIVERY_NICE that is not a number', { WEBHOOK_DELIVERY_NICE: 'low' }, 'WEBHOOK_DELIVERY_NICE'],
  ])('refuses %s with a message naming the variable', (_name, env, variable) => {
    const error = configError(env)
    expect(error.message).toContain(variable)
  })

  test('cluster mode needs Postgres and a shared secret, and keeps a lease longer than three heartbeats', () => {
    const secret = 'cluster-secret-0123456789abcdef0123456789'
    for (const value of ['1', 'true']) {
      const error = configError({ KASSA_CLUSTER: value, KASSA_CLUSTER_SECRET: secret })
      expect(error.message).toContain('KASSA_CLUSTER')
      expect(error.message).toContain('DATABASE_URL')
    }
    expect(configError({ KASSA_CLUSTER: '1', DATABASE_URL }).message).toContain('KASSA_CLUSTER_SECRET')
    expect(configError({ KASSA_CLUSTER: '1', DATABASE_URL, KASSA_CLUSTER_SECRET: 'short' }).message).toContain('KASSA_CLUSTER_SECRET')
    expect(configError({ KASSA_CLUSTER: '1', DATABASE_URL, KASSA_CLUSTER_SECRET: secret, KASSA_HEARTBEAT_MS: '2000' }).message).toContain('KASSA_HEARTBEAT_MS')
    expect(configError({ KASSA_CLUSTER: '1', DATABASE_URL, KASSA_CLUSTER_SECRET: secret, KASSA_INSTANCE_ID: 'a b' }).message).toContain('KASSA_INSTANCE_ID')
    expect(loadConfig({ KASSA_CLUSTER: '1', DATABASE_URL, KASSA_CLUSTER_SECRET: secret, KASSA_INSTANCE_ID: 'east-1' }).cluster).toEqual({
      instanceId: 'east-1',
      secret,
      internalPort: 0,
      internalHost: undefined,
      leaseTtlMs: 5000,
      heartbeatMs: 1000,
    })
    expect(loadConfig({ KASSA_CLUSTER: '0' }).cluster).toBeUndefined()
    expect(configError({ KASSA_CLUSTER: 'maybe' }).message).toContain('KASSA_CLUSTER')
  })

  test('cluster mode runs earning as a single server does: the sandbox venue in sandbox, off when asked', () => {
    const cluster = { KASSA_CLUSTER: '1', DATABASE_URL, KASSA_CLUSTER_SECRET: 'cluster-secret-0123456789abcdef0123456789' }
    expect(loadConfig(cluster).vaultVenue).toBe('sandbox')
    expect(loadConfig({ ...cluster, VAULT_VENUE: 'off' }).vaultVenue).toBe('off')
    expect(loadConfig({ VAULT_VENUE: 'sandbox' }).vaultVenue).toBe('sandbox')
  })

  test('quotes the bad value in the message', () => {
    expect(configError({ PORT: 'eighty' }).message).toContain('"eighty"')
    expect(configError({ SERVICE_ENV: 'staging' }).message).toContain('sandbox, production')
  })
})

describe('production', () => {
  const safe = { SERVICE_ENV: 'production', DATABASE_URL, OPERATOR_TOKEN, DEPOSIT_KEY_SEED: 'a1'.repeat(32) }

  test('starts with a database URL and an operator token', () => {
    expect(loadConfig(safe).serviceEnv).toBe('production')
  })

  test('refuses to start without DATABASE_URL', () => {
    const error = configError({ ...safe, DATABASE_URL: '' })
    expect(error.message).toContain('production refuses to start')
    expect(error.message).toContain('DATABASE_URL')
  })

  test('refuses to start without OPERATOR_TOKEN', () => {
    const error = configError({ SERVICE_ENV: 'production', DATABASE_URL })
    expect(error.message).toContain('OPERATOR_TOKEN')
  })

  test('refuses to start without its own DEPOSIT_KEY_SEED (the sandbox seed is public)', () => {
    expect(configError({ ...safe, DEPOSIT_KEY_SEED: '' }).message).toContain('DEPOSIT_KEY_SEED')
    expect(configError({ ...safe, DEPOSIT_KEY_SEED: SANDBOX_DEPOSIT_KEY_SEED_HEX }).message).toContain('DEPOSIT_KEY_SEED')
    expect(loadConfig(safe).depositKeySeedHex).toBe('a1'.repeat(32))
  })

  test('refuses a DEPOSIT_KEY_SEED that is not 32 to 128 bytes of hex', () => {
    for (const seed of ['a1'.repeat(31), 'zz'.repeat(32), 'a1'.repeat(32) + 'a', 'a1'.repeat(129)]) {
      expect(configError({ DEPOSIT_KEY_SEED: seed }).message).toContain('DEPOSIT_KEY_SEED')
    }
    expect(loadConfig({}).depositKeySeedHex).toBe(SANDBOX_DEPOSIT_KEY_SEED_HEX)
  })

  test('refuses the test switch KASSA_TEST_EXIT_AFTER_COMMIT, which sandbox honours', () => {
    expect(configError({ ...safe, KASSA_TEST_EXIT_AFTER_COMMIT: '1' }).message).toContain('KASSA_TEST_EXIT_AFTER_COMMIT')
    expect(loadConfig({ KASSA_TEST_EXIT_AFTER_COMMIT: '3' }).testExitAfterCommit).toBe(3)
    expect(loadConfig({}).testExitAfterCommit).toBe(0)
  })

  test('refuses ALLOW_LOOPBACK_WEBHOOKS=true', () => {
    const error = configError({ ...safe, ALLOW_LOOPBACK_WEBHOOKS: 'true' })
    expect(error.message).toContain('ALLOW_LOOPBACK_WEBHOOKS')
    expect(loadConfig({ ...safe, ALLOW_LOOPBACK_WEBHOOKS: 'false' }).allowLoopbackWebhooks).toBe(false)
  })

  test('names every problem at once', () => {
    const error = configError({ SERVICE_ENV: 'production', ALLOW_LOOPBACK_WEBHOOKS: '1' })
    for (const variable of ['DATABASE_URL', 'OPERATOR_TOKEN', 'ALLOW_LOOPBACK_WEBHOOKS']) expect(error.message).toContain(variable)
  })

  test('the real server process exits non-zero with the message when DATABASE_URL is missing', async () => {
    const env: Record<string, string> = {}
    for (const [name, value] of Object.entries(process.env)) if (value !== undefined) env[name] = value
    delete env.DATABASE_URL
    const server = Bun.spawn([process.execPath, 'server/main.ts'], {
      cwd: resolve(import.meta.dir, '../..'),
      env: { ...env, SERVICE_ENV: 'production', OPERATOR_TOKEN, PORT: '0', HOST: '127.0.0.1' },
      stdout: 'pipe',
      stderr: 'pipe',
    })
    const timer = setTimeout(() => server.kill(), 20_000)
    const exitCode = await server.exited
    clearTimeout(timer)
    const stderr = await new Response(server.stderr).text()
    const stdout = await new Response(server.stdout).text()
    expect(exitCode).not.toBe(0)
    expect(stderr).toContain('production refuses to start')
    expect(stderr).toContain('DATABASE_URL')
    expect(stdout).not.toContain('listening')
  })
})
