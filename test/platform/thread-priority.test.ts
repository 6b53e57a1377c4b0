import { afterEach, expect, test } from 'bun:test'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BACKGROUND_THREAD_NICE, REQUEST_THREAD_SLICE_NS } from '../../server/platform/thread-priority.ts'
import { startServerProcess, type ServerProcess } from '../support/server-process.ts'

// The real server process, read from Linux's /proc: what `REQUEST_THREAD_FIRST` does to its threads.

let server: ServerProcess | undefined
let dataDir: string | undefined

afterEach(async () => {
  await server?.stop()
  server = undefined
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
  dataDir = undefined
})

interface ThreadState {
  tid: number
  name: string
  nice: number
  /** The scheduler slice in ns, where the kernel shows it (`se.slice`). */
  sliceNs: number | undefined
}

function threadsOf(pid: number): ThreadState[] {
  const threads: ThreadState[] = []
  for (const name of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${name}/stat`, 'utf8')
      // After the name in parentheses (which may hold spaces): state is field 3, nice field 19.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      const sched = readFileSync(`/proc/${pid}/task/${name}/sched`, 'utf8')
      const slice = /^se\.slice\s*:\s*(\d+)/m.exec(sched)
      threads.push({
        tid: Number(name),
        name: readFileSync(`/proc/${pid}/task/${name}/comm`, 'utf8').trim(),
        nice: Number(fields[16]),
        sliceNs: slice ? Number(slice[1]) : undefined,
      })
    } catch {
      // The thread ended meanwhile.
    }
  }
  return threads
}

async function start(env: Record<string, string>): Promise<{ pid: number; output: () => string }> {
  dataDir = mkdtempSync(join(tmpdir(), 'kassa-threads-'))
  server = await startServerProcess({ DATA_DIR: dataDir, DATABASE_URL: '', ...env })
  return { pid: server.child.pid, output: server.output }
}

/** Waits until the start line about thread priority is printed (it follows the listening line). */
async function priorityLine(output: () => string): Promise<string> {
  for (let tries = 0; tries < 100; tries++) {
    const line = /kassa: request thread first: .*/.exec(output())
    if (line) return line[0]
    await Bun.sleep(50)
  }
  throw new Error(`no thread priority line:\n${output()}`)
}

/** The threads once every thread but the main one is at the lowest priority (new ones are found within a second), or as they are after 5 s. */
async function settled(pid: number): Promise<ThreadState[]> {
  let threads = threadsOf(pid)
  for (let tries = 0; tries < 50 && threads.some((thread) => thread.tid !== pid && thread.nice !== BACKGROUND_THREAD_NICE); tries++) {
    await Bun.sleep(100)
    threads = threadsOf(pid)
  }
  return threads
}

test.if(process.platform === 'linux')('the server puts its other threads at the lowest priority and gives the main thread a short slice', async () => {
  const { pid, output } = await start({})
  const line = await priorityLine(output)
  const threads = await settled(pid)
  const main = threads.find((thread) => thread.tid === pid)!
  const others = threads.filter((thread) => thread.tid !== pid)
  // The engine has threads of its own from the start (its compilers and collector).
  expect(others.length).toBeGreaterThan(0)
  expect(main.nice).toBe(0)
  for (const thread of others) expect({ name: thread.name, nice: thread.nice }).toEqual({ name: thread.name, nice: BACKGROUND_THREAD_NICE })
  // Linux 6.12 and later show each thread's slice and let a thread set its own; the line says which.
  if (main.sliceNs !== undefined && line.includes('scheduler slice')) {
    expect(main.sliceNs).toBe(REQUEST_THREAD_SLICE_NS)
    // Threads the main thread started after it inherited the slice and were given the default back.
    for (const thread of others) expect(thread.sliceNs).toBeGreaterThan(REQUEST_THREAD_SLICE_NS)
  }
  // It still serves.
  expect((await fetch(`${server!.baseUrl}/health`)).status).toBe(200)
}, 30_000)

test.if(process.platform === 'linux')('REQUEST_THREAD_FIRST=false leaves every thread as it started', async () => {
  const { pid, output } = await start({ REQUEST_THREAD_FIRST: 'false' })
  expect(await priorityLine(output)).toBe('kassa: request thread first: off (REQUEST_THREAD_FIRST=false)')
  const threads = threadsOf(pid)
  expect(threads.length).toBeGreaterThan(1)
  for (const thread of threads) expect({ name: thread.name, nice: thread.nice }).toEqual({ name: thread.name, nice: 0 })
  const main = threads.find((thread) => thread.tid === pid)!
  if (main.sliceNs !== undefined) expect(main.sliceNs).toBeGreaterThan(REQUEST_THREAD_SLICE_NS)
}, 30_000)
