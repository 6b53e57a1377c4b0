/**
 * `npm start` on the embedded default, timed to its first answer: the real server
 * (`bun server/main.ts`) started on a new data folder, stopped, and started again on the same folder.
 * Each start is timed from the spawn to the first `GET /health` answered 200 (asked every 50 ms),
 * with the server's own CPU time to that answer read from /proc (Linux). The templates a new folder
 * is written from are made before the first start if they are not there yet (that is once per
 * machine and set of migrations, and is not what is measured).
 *
 *   bun bench/start-up.ts
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { EMBEDDED_IN_MEMORY, openDatabase } from '../db/client.ts'

const REPO_ROOT = resolve(import.meta.dir, '..')
const POLL_MS = 50
const START_TIMEOUT_MS = 120_000

/** Clock ticks per second of /proc/<pid>/stat's CPU times: 100 on Linux. */
const CLOCK_TICKS_PER_S = 100

function cpuMsOf(pid: number): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_S
  } catch {
    return undefined
  }
}

async function startOnce(dataDir: string, port: number): Promise<{ firstAnswerMs: number; cpuMs: number | undefined }> {
  const startedAt = performance.now()
  const child = Bun.spawn([process.execPath, 'server/main.ts'], {
    cwd: REPO_ROOT,
    env: { ...process.env, DATABASE_URL: '', DATA_DIR: dataDir, PORT: String(port), SBT_PORT: '0', HOST: '127.0.0.1' },
    stdout: 'ignore',
    stderr: 'inherit',
  })
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the server exited with code ${child.exitCode} before answering`)
      if (performance.now() - startedAt > START_TIMEOUT_MS) throw new Error(`no answer within ${START_TIMEOUT_MS} ms`)
      const answered = await fetch(`http://127.0.0.1:${port}/health`).then(
        (response) => response.status === 200,
        () => false,
      )
      if (answered) return { firstAnswerMs: performance.now() - startedAt, cpuMs: cpuMsOf(child.pid) }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS))
    }
  } finally {
    child.kill('SIGTERM')
    await child.exited
  }
}

// Made here, outside the timing, if missing: opening a migrated in-memory database makes them.
await (await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 })).close()

const scratch = mkdtempSync(join(tmpdir(), 'kassa-start-up-'))
try {
  const port = 20_000 + Math.floor(Math.random() * 20_000)
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ')[0]
  const fresh = await startOnce(join(scratch, 'data'), port)
  const reopened = await startOnce(join(scratch, 'data'), port)
  const format = (run: { firstAnswerMs: number; cpuMs: number | undefined }) =>
    `${(run.firstAnswerMs / 1000).toFixed(2)} s (server CPU ${run.cpuMs === undefined ? 'unknown' : `${(run.cpuMs / 1000).toFixed(2)} s`})`
  console.log(`load average ${load}`)
  console.log(`start to first answer, new data folder: ${format(fresh)}`)
  console.log(`start to first answer, reopened:        ${format(reopened)}`)
} finally {
  rmSync(scratch, { recursive: true, force: true })
}
