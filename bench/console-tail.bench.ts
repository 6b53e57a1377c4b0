/**
 * The console's event tail under load: a real server process on Postgres, the real console in a
 * pseudo-terminal on its Events screen (filtered to the benchmark's type), and 1,000 events a
 * second written into the log for a minute (in transactions of 100, as the outbox writes them).
 * Reports how many the tail showed (each tick counted in the terminal's output: distinct, twice,
 * missing), how far behind it ended, and the console's memory every 5 s: its resident memory as the
 * system sees it, and, through the console's test-only memory probe (`console/memory-probe.ts`), its
 * resident memory and JavaScript heap after a full garbage collection, which is what it keeps; the
 * slope of that over the last 30 s says whether it grows. Nothing here passes or fails.
 *
 * BENCH_RATE (events a second, default 1000) and BENCH_DURATION_MS (default 60000) change the load;
 * BENCH_CONSOLE_GC=0 leaves the console's collections to the runtime (resident memory only).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import type { MemorySample } from '../console/memory-probe.ts'
import { runConsole } from '../test/console/pty.ts'
import { eventually } from '../test/support/eventually.ts'
import { createBenchDatabase, OPERATOR_TOKEN, startServer, writeResults } from './support.ts'

const RATE = Number(process.env.BENCH_RATE ?? 1000)
const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 60_000)
const BATCH = 100
const SAMPLE_MS = 5000
const DRAIN_MS_MAX = 60_000
const PROBE = process.env.BENCH_CONSOLE_GC !== '0'
/** The window at the end of the run whose memory slope is reported. */
const SLOPE_WINDOW_S = 30

function residentMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const match = /VmRSS:\s+(\d+) kB/.exec(status)
  return match ? Math.round(Number(match[1]) / 1024) : Number.NaN
}

/** Megabytes a minute: the least-squares slope of `values` over `seconds`. */
function slopeMbPerMinute(points: Array<{ atS: number; mb: number }>): number {
  const count = points.length
  if (count < 2) return Number.NaN
  const meanS = points.reduce((sum, point) => sum + point.atS, 0) / count
  const meanMb = points.reduce((sum, point) => sum + point.mb, 0) / count
  let covariance = 0
  let variance = 0
  for (const point of points) {
    covariance += (point.atS - meanS) * (point.mb - meanMb)
    variance += (point.atS - meanS) ** 2
  }
  return Math.round((covariance / variance) * 60 * 10) / 10
}

const probeFolder = mkdtempSync(join(tmpdir(), 'kassa-console-probe-'))
const probeFile = join(probeFolder, 'memory.jsonl')
let probes = 0

/** Asks the console for a sample after a full collection and waits for its answer in the probe file. */
async function probeConsole(pid: number): Promise<MemorySample> {
  probes += 1
  process.kill(pid, 'SIGUSR2')
  const lines = await eventually(
    () => {
      const text = (() => {
        try {
          return readFileSync(probeFile, 'utf8')
        } catch {
          return ''
        }
      })()
      const answered = text.split('\n').filter((line) => line !== '')
      return answered.length >= probes ? answered : undefined
    },
    { what: 'the console memory probe answer', timeoutMs: 30_000 },
  )
  // eventually answers only an accepted value: never undefined here.
  return JSON.parse(lines![probes - 1]!) as MemorySample
}

/** The console's bun process: the PTY's child is the console itself. */
const database = await createBenchDatabase('console_tail')
const server = await startServer({ ...database.serverEnv, WARM_UP_AUTHORIZATIONS: '0' })
const sql = postgres(database.url, { max: 2, onnotice: () => {} })
const terminal = runConsole({ KASSA_URL: server.base, OPERATOR_TOKEN, ...(PROBE ? { KASSA_CONSOLE_MEMORY_PROBE: probeFile } : {}) }, { columns: 100, rows: 30 })
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

  interface Sample {
    atS: number
    /** The console's resident memory as the system sees it (garbage not yet collected included). */
    consoleMb: number
    /** After a full collection in the console (its memory probe): what it keeps. */
    afterGcMb?: number
    heapMb?: number
    objects?: number
    externalMb?: number
    serverMb: number
    received: number
  }
  const samples: Sample[] = []
  const startedAt = performance.now()
  const sample = async (): Promise<void> => {
    const atS = Math.round((performance.now() - startedAt) / 1000)
    const consoleMb = residentMb(terminal.child.pid)
    const serverMb = residentMb(server.process.pid)
    const shownNow = received() - start
    const probe = PROBE ? await probeConsole(terminal.child.pid) : undefined
    samples.push({ atS, consoleMb, afterGcMb: probe?.rssMb, heapMb: probe?.heapMb, objects: probe?.objects, externalMb: probe?.externalMb, serverMb, received: shownNow })
  }
  let writing = true
  // Sampling runs beside the writing, so a probe's collection in the console never holds the writer back.
  const sampler = (async () => {
    for (let index = 1; writing; index++) {
      await sample()
      await Bun.sleep(Math.max(0, startedAt + index * SAMPLE_MS - performance.now()))
    }
  })()
  let written = 0
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
    await Bun.sleep(5)
  }
  writing = false
  const writtenMs = performance.now() - startedAt
  const behindAtEnd = written - (received() - start)
  const drainStarted = performance.now()
  while (received() - start < written && performance.now() - drainStarted < DRAIN_MS_MAX) await Bun.sleep(50)
  const drainMs = Math.round(performance.now() - drainStarted)
  await sampler
  await sample()
  const shown = received() - start

  // Each tick as the terminal received it: the count on the status line says how many lines, this
  // says whether each event came once.
  const timesShown = new Map<number, number>()
  for (const match of terminal.raw().matchAll(/bench\.tick tick_(\d+) /g)) timesShown.set(Number(match[1]), (timesShown.get(Number(match[1])) ?? 0) + 1)
  let missing = 0
  for (let tick = 0; tick < written; tick++) if (!timesShown.has(tick)) missing += 1
  const twice = [...timesShown.values()].filter((times) => times > 1).length

  const summarize = (values: number[]) => ({ first: values[0], max: Math.max(...values), last: values.at(-1) })
  const lastWindow = samples.filter((entry) => entry.atS >= Math.round(writtenMs / 1000) - SLOPE_WINDOW_S && entry.atS <= Math.round(writtenMs / 1000))
  const probed = samples.filter((entry) => entry.afterGcMb !== undefined)
  const result = {
    rate: RATE,
    durationMs: DURATION_MS,
    written,
    writtenPerSecond: Math.round((written * 1000) / writtenMs),
    shown,
    distinctShown: timesShown.size,
    shownTwice: twice,
    missing,
    behindAtEnd,
    drainMs,
    consoleRssMb: summarize(samples.map((entry) => entry.consoleMb)),
    consoleAfterGcMb: PROBE ? summarize(probed.map((entry) => entry.afterGcMb!)) : undefined,
    consoleHeapMb: PROBE ? summarize(probed.map((entry) => entry.heapMb!)) : undefined,
    consoleRssSlopeMbPerMinute: slopeMbPerMinute(lastWindow.map((entry) => ({ atS: entry.atS, mb: entry.consoleMb }))),
    consoleAfterGcSlopeMbPerMinute: PROBE ? slopeMbPerMinute(lastWindow.map((entry) => ({ atS: entry.atS, mb: entry.afterGcMb! }))) : undefined,
    samples,
  }
  const range = (summary: { first?: number; max: number; last?: number }) => `first ${summary.first} MB, max ${summary.max} MB, last ${summary.last} MB`
  const markdown = [
    `# Console tail at ${RATE} events/s for ${DURATION_MS / 1000} s`,
    '',
    `- written: ${written} (${result.writtenPerSecond}/s); shown by the tail: ${shown} lines, ${result.distinctShown} distinct events, ${twice} shown twice, ${missing} missing; behind when the writing stopped: ${behindAtEnd}; caught up ${drainMs} ms later`,
    `- console resident memory as the system sees it: ${range(result.consoleRssMb)}; slope over the last ${SLOPE_WINDOW_S} s of writing: ${result.consoleRssSlopeMbPerMinute} MB/min`,
    ...(PROBE
      ? [
          `- console after a full collection (sampled every ${SAMPLE_MS / 1000} s): resident ${range(result.consoleAfterGcMb!)}, slope over the last ${SLOPE_WINDOW_S} s of writing ${result.consoleAfterGcSlopeMbPerMinute} MB/min; JavaScript heap ${range(result.consoleHeapMb!)}`,
        ]
      : ['- the console collected garbage on its own (BENCH_CONSOLE_GC=0)']),
    '',
    '| s | console RSS MB | after GC MB | heap MB | live objects | external MB | server RSS MB | shown |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...samples.map((entry) => `| ${entry.atS} | ${entry.consoleMb} | ${entry.afterGcMb ?? '–'} | ${entry.heapMb ?? '–'} | ${entry.objects ?? '–'} | ${entry.externalMb ?? '–'} | ${entry.serverMb} | ${entry.received} |`),
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
  rmSync(probeFolder, { recursive: true, force: true })
}
