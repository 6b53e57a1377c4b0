import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawnServerProcess } from '../support/server-process.ts'

const scratch = mkdtempSync(join(tmpdir(), 'kassa-start-refusals-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

/** Each of these starts real server processes, on a machine that may be busy. */
const SPAWN_TEST_TIMEOUT_MS = 60_000

/** Starts `bun server/main.ts` expecting it to refuse to start: its exit code and what it printed (killed after 30 s). */
async function refusedStart(env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawnServerProcess(env)
  const stop = setTimeout(() => child.kill(9), 30_000)
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  clearTimeout(stop)
  return { code, stdout, stderr }
}

/** One line, naming the problem; no stack trace, no driver source excerpt. */
function expectOneClearLine(stderr: string, ...mentions: string[]): void {
  const lines = stderr.trim().split('\n')
  expect(lines).toHaveLength(1)
  for (const mention of mentions) expect(lines[0]).toContain(mention)
  expect(stderr).not.toMatch(/^\s+at /m)
  expect(stderr).not.toContain('node_modules')
}

describe('a start refused before it creates or prints anything', () => {
  test('a port in use: refused before a data folder is created or an operator token printed', async () => {
    const holder = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response('taken') })
    try {
      const dataDir = join(scratch, 'port-in-use')
      const refused = await refusedStart({ DATABASE_URL: '', PORT: String(holder.port), DATA_DIR: dataDir, OPERATOR_TOKEN: '' })
      expect(refused.code).toBe(1)
      expectOneClearLine(refused.stderr, `127.0.0.1:${holder.port}`, 'PORT')
      expect(refused.stdout).not.toContain('operator token')
      expect(refused.stdout).toBe('')
      expect(existsSync(dataDir)).toBe(false)
    } finally {
      holder.stop(true)
    }
  }, SPAWN_TEST_TIMEOUT_MS)

  test('KASSA_CLUSTER=1 is a configuration error: cluster mode is not built, so no second writer starts', async () => {
    const refused = await refusedStart({ DATABASE_URL: '', KASSA_CLUSTER: '1', DATA_DIR: join(scratch, 'cluster') })
    expect(refused.code).toBe(2)
    expectOneClearLine(refused.stderr, 'configuration error', 'KASSA_CLUSTER', 'not available')
    expect(existsSync(join(scratch, 'cluster'))).toBe(false)
  }, SPAWN_TEST_TIMEOUT_MS)
})
