import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import { createTestDatabase, onPostgres, type TestDatabase } from './db.ts'

const REPO_ROOT = resolve(import.meta.dir, '../..')
const BUN = join(REPO_ROOT, 'node_modules/.bin/bun')
const START_TIMEOUT_MS = 30_000
/** Longer than a server's own stop may take: it gives its delivery process 10 s to end. */
const STOP_TIMEOUT_MS = 15_000
/** How long an ended server's output is waited for: a process it started may still hold the pipe. */
const DRAIN_TIMEOUT_MS = 2_000

/** A real `bun server/main.ts` child process and the base URL it listens on. */
export interface ServerProcess {
  child: Subprocess<'ignore', 'pipe', 'pipe'>
  baseUrl: string
  /** Everything the process printed so far (stdout and stderr), for failure messages. */
  output(): string
  /** `kill -9`: no shutdown hook runs, nothing is flushed. */
  kill9(): Promise<void>
  /**
   * SIGTERM and a clean shutdown, SIGKILL if it takes longer than the server's own stop may (it
   * waits up to 10 s for its delivery process); resolves once what it printed has been read.
   */
  stop(): Promise<void>
}

/**
 * Spawns the real server (`bun server/main.ts`) with `env` on top of this process's environment, on
 * a free loopback port unless `env` names one, load shedding off unless `env` turns it on (see
 * `startServerProcess`) and no warm-up unless `env` asks for one (`WARM_UP_AUTHORIZATIONS`: its
 * seconds at every start of every crash round, measured in `Config.warmUpAuthorizations`, would only
 * lengthen the suite; it has its own tests);
 * its output piped, for the caller to read.
 */
export function spawnServerProcess(env: Record<string, string>): Subprocess<'ignore', 'pipe', 'pipe'> {
  return Bun.spawn([BUN, 'server/main.ts'], {
    cwd: REPO_ROOT,
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOAD_SHEDDING: 'false', WARM_UP_AUTHORIZATIONS: '0', ...env },
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
  })
}

/**
 * Starts the real server (`bun server/main.ts`) on a free loopback port with `env` on top of this
 * process's environment, and resolves once it prints where it listens. stdout and stderr are
 * drained for the whole life of the child, so it never blocks on a full pipe.
 *
 * Load shedding is off unless `env` turns it on (`LOAD_SHEDDING`), as for every other test: these
 * servers test durability across crashes and outages, on a CI machine busy with other test files,
 * where a late event loop would otherwise shed some of their authorizations with 429 (seen once in
 * CI in the payments crash test). Shedding has its own tests.
 */
export async function startServerProcess(env: Record<string, string>, options: { startTimeoutMs?: number } = {}): Promise<ServerProcess> {
  const startTimeoutMs = options.startTimeoutMs ?? START_TIMEOUT_MS
  const child = spawnServerProcess(env)
  const chunks: string[] = []
  const output = () => chunks.join('')
  const stderrRead = (async () => {
    const decoder = new TextDecoder()
    for await (const chunk of child.stderr) chunks.push(decoder.decode(chunk))
  })()
  // One reader for the child's whole life: leaving a `for await` early would cancel the stream, and
  // what the server prints after its start line (and its writes) would be lost.
  const { promise: listening, resolve: resolveListening, reject: rejectListening } = Promise.withResolvers<string>()
  const stdoutRead = (async () => {
    const decoder = new TextDecoder()
    let found = false
    let text = ''
    for await (const chunk of child.stdout) {
      const piece = decoder.decode(chunk)
      chunks.push(piece)
      if (found) continue
      text += piece
      const match = /listening on (http:\/\/[\d.]+:\d+)/.exec(text)
      if (match) {
        found = true
        resolveListening(match[1]!)
      }
    }
    if (!found) rejectListening(new Error(`the server exited before listening:\n${output()}`))
  })().catch(rejectListening)
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the server did not start within ${startTimeoutMs} ms:\n${output()}`)), startTimeoutMs)
  })
  let baseUrl: string
  try {
    baseUrl = await Promise.race([listening, timeout])
  } catch (error) {
    child.kill(9)
    throw error
  } finally {
    clearTimeout(timer)
  }
  return {
    child,
    baseUrl,
    output,
    async kill9() {
      child.kill(9)
      await child.exited
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM')
        const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(STOP_TIMEOUT_MS).then(() => false)])
        if (!exited) {
          child.kill('SIGKILL')
          await child.exited
        }
      }
      // The exit can be seen before the last lines are read from the pipes.
      await Promise.race([Promise.all([stdoutRead, stderrRead]).catch(() => {}), Bun.sleep(DRAIN_TIMEOUT_MS)])
    },
  }
}

/** A JSON client for one server and one bearer token (an API key or the operator token). */
export function jsonClient(baseUrl: () => string, token: string) {
  return async function send(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    const response = await fetch(`${baseUrl()}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    const text = await response.text()
    let parsed: unknown = text
    try {
      parsed = text === '' ? undefined : JSON.parse(text)
    } catch {
      // Not JSON; the raw text is the body.
    }
    return { status: response.status, body: parsed }
  }
}

/**
 * Lets a load run until it has done `enough()` work and at least `minMs` have passed (at most
 * `maxMs`), so a crash round kills the server in the middle of real work even on a slow machine
 * or a slow embedded database.
 */
export async function loadUntil(enough: () => boolean, options: { minMs: number; maxMs: number }): Promise<void> {
  const started = performance.now()
  await Bun.sleep(options.minMs)
  while (!enough() && performance.now() - started < options.maxMs) await Bun.sleep(10)
}

/**
 * What a crash test's server processes keep across their kills and restarts: a database of the
 * test's own on the Postgres under test, or else a data folder for the embedded database on disk
 * (in memory, nothing would survive a kill). `env` carries it to every start; `release` drops the
 * database or removes the folder.
 */
export interface CrashStorage {
  env: Record<string, string>
  release(): Promise<void>
}

export async function crashStorage(folderPrefix: string): Promise<CrashStorage> {
  if (onPostgres) {
    const database: TestDatabase = await createTestDatabase()
    return { env: { DATABASE_URL: database.databaseUrl! }, release: () => database.drop() }
  }
  const dataDir = mkdtempSync(join(tmpdir(), folderPrefix))
  return { env: { DATA_DIR: dataDir }, release: async () => rmSync(dataDir, { recursive: true, force: true }) }
}

/**
 * Starts `bun server/main.ts` expecting it to refuse to start: its exit code and what it printed.
 * One that starts after all is killed after 30 s, so the test fails rather than waits.
 */
export async function refusedStart(env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawnServerProcess(env)
  const stop = setTimeout(() => child.kill(9), 30_000)
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  clearTimeout(stop)
  return { code, stdout, stderr }
}
