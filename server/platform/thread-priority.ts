import { readdirSync, readFileSync } from 'node:fs'
import { getPriority, setPriority } from 'node:os'

/**
 * The request thread first (Linux). Everything a request waits for runs on the process's main
 * thread: HTTP, authentication, the decision, the ledger writer's statements and their replies.
 * Beside it the process runs threads of its own: the JavaScript engine's JIT compilers and garbage
 * collector, the allocator's scavenger, Bun's I/O pool. Their work is useful, but none of it is a
 * request's, and on cores shared with the database and the rest of the machine the scheduler let
 * them keep the core the main thread was woken on for 1 to 4 ms while it waited, ready to run:
 * `perf sched` at 1000/s counted 21 such waits over 1 ms in 4 s,
 * behind the compiler and the scavenger (docs/architecture.md, "The request thread first").
 *
 * So the other threads run at the lowest priority (nice 19: about 1.5% of a core against the main
 * thread when both want the same one, and all of any core that nothing else wants), and the main
 * thread asks for a short scheduler slice (0.1 ms; Linux 6.12 and later let an ordinary thread set
 * its own with `sched_setattr`), with which its wake preempts what runs in its place rather than
 * waiting for that thread's slice to end. Either alone about halved those waits; together they
 * were 4 in 4 s. The engine starts threads as it needs them, so new ones are looked for every
 * second; a thread started by the main thread inherits its slice, and is given the default back.
 *
 * Where this cannot be done (not Linux, no glibc, an architecture whose system call number is not
 * known here), what could not be done is left as it was and said in the summary.
 */
export interface ThreadPriority {
  /** What was done, for the log line at start. */
  readonly summary: string
  stop(): void
}

/** The main thread's scheduler slice, nanoseconds. */
export const REQUEST_THREAD_SLICE_NS = 100_000
/** The other threads' niceness. */
export const BACKGROUND_THREAD_NICE = 19
const RESCAN_MS = 1000

/** `sched_setattr` by architecture (Linux's system call tables). */
const SCHED_SETATTR: Partial<Record<string, bigint>> = { x64: 314n, arm64: 274n }

/** Sets a thread's niceness and scheduler slice (0: the default) with `sched_setattr`; answers whether it was done. */
type SetAttributes = (tid: number, nice: number, sliceNs: number) => boolean

export async function requestThreadFirst(): Promise<ThreadPriority> {
  if (process.platform !== 'linux') return { summary: 'unchanged (not Linux)', stop: () => {} }
  const setAttributes = await loadSchedSetattr()
  const accepted = typeof setAttributes === 'function' && setAttributes(0, getPriority(), REQUEST_THREAD_SLICE_NS)
  // A kernel before custom slices (6.12) accepts the call and keeps its own slice: read it back
  // where the kernel shows it.
  const shown = shownSliceNs()
  const sliced = accepted && (shown === undefined || shown === REQUEST_THREAD_SLICE_NS)
  const lowered = new Set<number>()
  const refused = new Set<number>()
  const lower = (tid: number) => {
    if (typeof setAttributes === 'function' && setAttributes(tid, BACKGROUND_THREAD_NICE, 0)) return true
    try {
      // On Linux a thread id names that thread alone: the main thread keeps its priority.
      setPriority(tid, BACKGROUND_THREAD_NICE)
      return true
    } catch {
      return false
    }
  }
  const scan = () => {
    let tids: string[]
    try {
      tids = readdirSync('/proc/self/task')
    } catch {
      return
    }
    for (const name of tids) {
      const tid = Number(name)
      if (tid === process.pid || lowered.has(tid) || refused.has(tid)) continue
      // A thread that refused (or ended meanwhile) is not tried again.
      ;(lower(tid) ? lowered : refused).add(tid)
    }
  }
  scan()
  const timer = setInterval(scan, RESCAN_MS)
  timer.unref()
  const why = typeof setAttributes === 'string' ? setAttributes : accepted ? `this kernel keeps its own, ${shown} ns` : 'sched_setattr refused'
  const slice = sliced ? `the main thread's scheduler slice ${REQUEST_THREAD_SLICE_NS / 1000} µs` : `the main thread's slice unchanged (${why})`
  return { summary: `${slice}; the process's other threads at nice ${BACKGROUND_THREAD_NICE}`, stop: () => clearInterval(timer) }
}

/** The main thread's slice (ns) as the kernel shows it in `/proc` (`se.slice`), where it does. */
function shownSliceNs(): number | undefined {
  try {
    const match = /^se\.slice\s*:\s*(\d+)/m.exec(readFileSync(`/proc/self/task/${process.pid}/sched`, 'utf8'))
    return match ? Number(match[1]) : undefined
  } catch {
    return undefined
  }
}

/** `sched_setattr` through libc's `syscall`, or why it is not to be had here. */
async function loadSchedSetattr(): Promise<SetAttributes | string> {
  const number = SCHED_SETATTR[process.arch]
  if (number === undefined) return `no sched_setattr number for ${process.arch}`
  try {
    const { dlopen, FFIType, ptr } = await import('bun:ffi')
    const libc = dlopen('libc.so.6', { syscall: { args: [FFIType.i64, FFIType.i64, FFIType.ptr, FFIType.i64], returns: FFIType.i64 } })
    // struct sched_attr, its first version (56 bytes): size, policy (0, SCHED_OTHER), flags, nice,
    // priority, runtime, deadline, period. For SCHED_OTHER the runtime is the slice (0: the default).
    const attr = new Uint8Array(56)
    const fields = new DataView(attr.buffer)
    return (tid, nice, sliceNs) => {
      attr.fill(0)
      fields.setUint32(0, 56, true)
      fields.setInt32(16, nice, true)
      fields.setBigUint64(24, BigInt(sliceNs), true)
      return Number(libc.symbols.syscall(number, BigInt(tid), ptr(attr), 0n)) === 0
    }
  } catch (error) {
    return error instanceof Error ? error.message : String(error)
  }
}
