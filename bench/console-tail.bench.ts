/**
 * The console's event tail under load: a real server process on Postgres, the real console in a
 * pseudo-terminal on its Events screen (filtered to the benchmark's type), and 1,000 events a
 * second written into the log for a minute (in transactions of 100, as the outbox writes them).
 * Reports how many the tail showed, how far behind it ended, and the console's and the server's
 * resident memory sampled every 5 s. Nothing here passes or fails.
 *
 * BENCH_RATE (events a second, default 1000) and BENCH_DURATION_MS (default 60000) change the load.
 */
import { readFileSync } from 'node:fs'
import postgres from 'postgres'
import { runConsole } from '../test/console/pty.ts'
import { createBenchDatabase, OPERATOR_TOKEN, startServer, writeResults } from './support.ts'

const RATE = Number(process.env.BENCH_RATE ?? 1000)
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 60_000)
const BATCH = 100
const SAMPLE_MS = 5000
const DRAIN_MS_MAX = 60_000

function residentMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const match = /VmRSS:\s+(\d+) kB/.exec(status)
  return match ? Math.round(Number(match[1]) / 1024) : Number.NaN
}

/** The console's bun process: the PTY's child is the console itself. */
const database = await createBenchDatabase('console_tail')
const server = await startServer({ ...database.serverEnv, WARM_UP_AUTHORIZATIONS: '0' })
const sql = postgres(database.url, { max: 2, onnotice: () => {} })
const terminal = runConsole({ KASSA_URL: server.base, OPERATOR_TOKEN }, { columns: 100, rows: 30 })
let lastReceived = 0
/** The tail's count from its status line (the last one read while a frame is being redrawn). */
const received = () => {
  const match = / (\d+) received/.exec(terminal.screen())
  if (match) lastReceived = Number(match[1])
  return lastReceived
}
try {
  await terminal.waitFor('last error: none', 60_000)
  terminal.press('2')
  await terminal.waitFor(/· live ·/)
  terminal.press('t')
  await terminal.waitFor('Types (exact')
  terminal.press('bench.tick')
  await terminal.waitFor('bench.tick')
  terminal.press('\r')
  await terminal.waitFor(/Tail types bench\.tick · org all · live · \d+ received/)
  const start = received()

  const samples: Array<{ atS: number; consoleMb: number; serverMb: number; received: number }> = []
  const startedAt = performance.now()
  let written = 0
  let nextSample = 0
  const total = Math.floor((RATE * DURATION_MS) / 1000)
  while (written < total) {
    const elapsed = performance.now() - startedAt
    const due = Math.min(total, Math.floor((elapsed * RATE) / 1000))
    while (written + BATCH <= due || (due === total && written < total)) {
      const count = Math.min(BATCH, total - written)
      const rows = Array.from({ length: count }, (_, index) => ({
        id: `evt_${Bun.randomUUIDv7('hex').replaceAll('-', '')}`,
        org_id: null,
        type: 'bench.tick',
        data: sql.json({ id: `tick_${written + index}`, state: 'ok' }),
        created_at: new Date(),
      }))
      await sql`insert into events ${sql(rows, 'id', 'org_id', 'type', 'data', 'created_at')}`
      written += count
    }
    if (elapsed >= nextSample) {
      samples.push({ atS: Math.round(elapsed / 1000), consoleMb: residentMb(terminal.child.pid), serverMb: residentMb(server.process.pid), received: received() - start })
      nextSample += SAMPLE_MS
    }
    await Bun.sleep(5)
  }
  const writtenMs = performance.now() - startedAt
  const behindAtEnd = written - (received() - start)
  const drainStarted = performance.now()
  while (received() - start < written && performance.now() - drainStarted < DRAIN_MS_MAX) await Bun.sleep(50)
  const drainMs = Math.round(performance.now() - drainStarted)
  const shown = received() - start
  samples.push({ atS: Math.round((performance.now() - startedAt) / 1000), consoleMb: residentMb(terminal.child.pid), serverMb: residentMb(server.process.pid), received: shown })

  const consoleMbs = samples.map((sample) => sample.consoleMb)
  const result = {
    rate: RATE,
    durationMs: DURATION_MS,
    written,
    writtenPerSecond: Math.round((written * 1000) / writtenMs),
    shown,
    behindAtEnd,
    drainMs,
    consoleRssMb: { first: consoleMbs[0], max: Math.max(...consoleMbs), last: consoleMbs.at(-1) },
    samples,
  }
  const markdown = [
    `# Console tail at ${RATE} events/s for ${DURATION_MS / 1000} s`,
    '',
    `- written: ${written} (${result.writtenPerSecond}/s); shown by the tail: ${shown}; behind when the writing stopped: ${behindAtEnd}; caught up ${drainMs} ms later`,
    `- console resident memory: first ${result.consoleRssMb.first} MB, max ${result.consoleRssMb.max} MB, last ${result.consoleRssMb.last} MB`,
    '',
    '| s | console RSS MB | server RSS MB | shown |',
    '| ---: | ---: | ---: | ---: |',
    ...samples.map((sample) => `| ${sample.atS} | ${sample.consoleMb} | ${sample.serverMb} | ${sample.received} |`),
    '',
  ].join('\n')
  console.log(markdown)
  console.log(`written to ${writeResults('console-tail', result, markdown)}`)
} finally {
  terminal.press('q')
  await terminal.stop()
  await sql.end()
  await server.stop()
  await database.drop()
}
