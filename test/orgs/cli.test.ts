import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import { planCall } from '../../server/cli.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'

const ROOT = resolve(import.meta.dir, '../..')
const STARTUP_TIMEOUT_MS = 45_000

let dataDir: string
let database: TestDatabase
let server: Subprocess<'ignore', 'pipe', 'pipe'>
let baseUrl: string

function inheritedEnv(): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined) env[name] = value
  for (const name of ['DATABASE_URL', 'OPERATOR_TOKEN', 'KASSA_URL', 'SERVICE_ENV', 'PORT', 'HOST', 'DATA_DIR']) delete env[name]
  return env
}

/** Reads the server's stdout until it says where it listens. */
async function waitForListening(process: Subprocess<'ignore', 'pipe', 'pipe'>): Promise<string> {
  const reader = process.stdout.getReader()
  const decoder = new TextDecoder()
  let seen = ''
  const deadline = Date.now() + STARTUP_TIMEOUT_MS
  while (Date.now() < deadline) {
    const { done, value } = await reader.read()
    if (done) break
    seen += decoder.decode(value)
    const match = /listening on (http:\/\/\S+)/.exec(seen)
    if (match) {
      reader.releaseLock()
      return match[1]!
    }
  }
  throw new Error(`server did not start; stdout:\n${seen}\nstderr:\n${await new Response(process.stderr).text()}`)
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'kassa-cli-'))
  database = await createTestDatabase()
  const env = { ...inheritedEnv(), SERVICE_ENV: 'sandbox', PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir }
  // On Postgres the server gets this file's own database; otherwise the embedded one in DATA_DIR.
  if (database.databaseUrl !== undefined) Object.assign(env, { DATABASE_URL: database.databaseUrl })
  server = Bun.spawn([process.execPath, 'server/main.ts'], { cwd: ROOT, env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  baseUrl = await waitForListening(server)
  // Starting the embedded database on disk takes seconds on a busy machine: more than a hook's default.
}, STARTUP_TIMEOUT_MS + 5_000)

afterAll(async () => {
  server?.kill('SIGTERM')
  await server?.exited
  await database?.drop()
  rmSync(dataDir, { recursive: true, force: true })
}, 30_000)

interface CliResult {
  exitCode: number
  stdout: string
  stderr: string
}

async function cli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const child = Bun.spawn([process.execPath, 'server/cli.ts', ...args], {
    cwd: ROOT,
    // No OPERATOR_TOKEN: the CLI reads the token the sandbox server generated into DATA_DIR.
    env: { ...inheritedEnv(), KASSA_URL: baseUrl, DATA_DIR: dataDir, ...env },
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [exitCode, stdout, stderr] = await Promise.all([child.exited, new Response(child.stdout).text(), new Response(child.stderr).text()])
  return { exitCode, stdout, stderr }
}

describe('operator CLI against a real server', () => {
  test('creates an organization and lists it, with the token the sandbox server generated', async () => {
    expect(readFileSync(join(dataDir, 'operator-token'), 'utf8').trim()).toMatch(/^op_/)
    const created = await cli(['orgs', 'create', 'CLI', 'Corp'])
    expect(created.stderr).toBe('')
    expect(created.exitCode).toBe(0)
    const org = JSON.parse(created.stdout)
    expect(org.id).toMatch(/^org_/)
    expect(org.name).toBe('CLI Corp')
    expect(org.keys.map((key: { type: string }) => key.type).sort()).toEqual(['publishable', 'test'])

    const listed = await cli(['orgs', 'list'])
    expect(listed.exitCode).toBe(0)
    const { orgs } = JSON.parse(listed.stdout)
    expect(orgs.map((entry: { id: string; name: string }) => [entry.id, entry.name])).toContainEqual([org.id, 'CLI Corp'])
    expect(listed.stdout).not.toContain(org.keys[0].key)

    // The key the CLI printed works against the same server.
    const call = await fetch(`${baseUrl}/v1/accounts`, { headers: { authorization: `Bearer ${org.keys.find((key: { type: string }) => key.type === 'test').key}` } })
    expect(call.status).toBe(200)
  })

  test('walks an organization through onboarding to a production key, and sets its limit', async () => {
    const org = JSON.parse((await cli(['orgs', 'create', 'Onboarded'])).stdout)
    const early = await cli(['keys', 'issue', org.id, 'secret', 'production'])
    expect(early.exitCode).toBe(1)
    expect(early.stderr).toContain('409 conflict')
    expect(early.stdout).toBe('')
    expect((await cli(['onboarding', 'check', org.id, 'business_verified', 'agreement_signed', 'security_review', 'webhooks_tested'])).exitCode).toBe(0)
    const signedOff = await cli(['onboarding', 'sign-off', org.id, 'ops@kassa.test'])
    expect(signedOff.exitCode).toBe(0)
    expect(JSON.parse(signedOff.stdout).onboarding.signedOffBy).toBe('ops@kassa.test')
    const issued = await cli(['keys', 'issue', org.id, 'secret', 'production'])
    expect(issued.exitCode).toBe(0)
    expect(JSON.parse(issued.stdout).key).toMatch(/^svc_secret_/)
    const limit = await cli(['limits', 'set', org.id, '5000'])
    expect(JSON.parse(limit.stdout).rateLimitPerMinute).toBe(5000)
    expect(JSON.parse((await cli(['limits', 'set', org.id, 'default'])).stdout).rateLimitPerMinute).toBe(1000)
    const testKeyId = org.keys.find((key: { type: string }) => key.type === 'test').id
    const rotated = await cli(['keys', 'rotate', testKeyId, '--overlap-seconds', '60'])
    expect(rotated.exitCode).toBe(0)
    expect(JSON.parse(rotated.stdout).previous.status).toBe('expiring')
    const revoked = await cli(['keys', 'revoke', JSON.parse(rotated.stdout).key.id])
    expect(JSON.parse(revoked.stdout).status).toBe('revoked')
    const shown = JSON.parse((await cli(['orgs', 'show', org.id])).stdout)
    expect(shown.keys).toHaveLength(4)
  })

  test('fails with exit code 1 and the server error for a wrong token or a missing org', async () => {
    const wrongToken = await cli(['orgs', 'list'], { OPERATOR_TOKEN: 'op_wrong_token_0123456789abcdefghijklmnop' })
    expect(wrongToken.exitCode).toBe(1)
    expect(wrongToken.stderr).toContain('401 authentication_error')
    const missing = await cli(['orgs', 'show', 'org_00000000000000000000000000000000'])
    expect(missing.exitCode).toBe(1)
    expect(missing.stderr).toContain('404 not_found')
  })

  test('fails with exit code 2 and the usage for a bad command line, without calling the server', async () => {
    for (const args of [[], ['orgs'], ['orgs', 'delete', 'x'], ['keys', 'issue', 'org_x', 'master', 'sandbox'], ['limits', 'set', 'org_x', 'lots']]) {
      const result = await cli(args, { KASSA_URL: 'http://127.0.0.1:1' })
      expect(result.exitCode).toBe(2)
      expect(result.stderr).toContain('Usage: bun run cli')
      expect(result.stdout).toBe('')
    }
    const help = await cli(['help'])
    expect(help.exitCode).toBe(0)
    expect(help.stdout).toContain('orgs create <name>')
  })

  test('says so when the server cannot be reached', async () => {
    const result = await cli(['orgs', 'list'], { KASSA_URL: 'http://127.0.0.1:1' })
    expect(result.exitCode).toBe(1)
    expect(result.stderr).toContain('cannot reach')
  })
})

describe('command lines', () => {
  test.each([
    [['orgs', 'create', 'Acme'], { method: 'POST', path: '/ops/v1/orgs', body: { name: 'Acme' } }],
    [['orgs', 'show', 'org_1'], { method: 'GET', path: '/ops/v1/orgs/org_1' }],
    [['keys', 'rotate', 'key_1'], { method: 'POST', path: '/ops/v1/keys/key_1/rotate', body: {} }],
    [['keys', 'rotate', 'key_1', '--overlap-seconds=0'], { method: 'POST', path: '/ops/v1/keys/key_1/rotate', body: { overlapSeconds: 0 } }],
    [['onboarding', 'check', 'org_1', 'agreement_signed'], { method: 'PATCH', path: '/ops/v1/orgs/org_1/onboarding', body: { items: { agreement_signed: true } } }],
    [['limits', 'set', 'org_1', 'default'], { method: 'PATCH', path: '/ops/v1/orgs/org_1/limits', body: { rateLimitPerMinute: null } }],
    [['orgs', 'show', '../keys'], { method: 'GET', path: '/ops/v1/orgs/..%2Fkeys' }],
    [['orgs', 'list'], { method: 'GET', path: '/ops/v1/orgs' }],
    [['orgs', 'list', '--limit', '2'], { method: 'GET', path: '/ops/v1/orgs?limit=2' }],
    [['orgs', 'list', '--after=org_1', '--limit=200'], { method: 'GET', path: '/ops/v1/orgs?after=org_1&limit=200' }],
    [['orgs', 'list', '--after', 'org_1&limit=9'], { method: 'GET', path: '/ops/v1/orgs?after=org_1%26limit%3D9' }],
  ])('%p becomes one operator API call', (argv, expected) => {
    expect(planCall(argv as string[])).toEqual(expected as ReturnType<typeof planCall>)
  })

  test.each([
    [['keys', 'rotate', 'key_1', '--overlap-seconds', '-1']],
    [['keys', 'rotate', 'key_1', '--overlap']],
    [['onboarding', 'check', 'org_1', 'made_up_item']],
    [['keys', 'issue', 'org_1', 'test']],
    [['orgs', 'list', 'extra']],
    [['orgs', 'list', '--limit', '0']],
    [['orgs', 'list', '--limit=lots']],
    [['orgs', 'list', '--after']],
    [['orgs', 'list', '--after=']],
  ])('%p is a usage error', (argv) => {
    expect(() => planCall(argv)).toThrow()
  })
})
