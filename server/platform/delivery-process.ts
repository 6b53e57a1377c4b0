import { fileURLToPath } from 'node:url'
import type { Subprocess } from 'bun'

/** Waits before starting the process again after it ended on its own, one more each time it ends soon again, up to the last. */
const RESTART_DELAYS_MS = [1_000, 2_000, 5_000, 10_000, 30_000]
/** A process that ran this long before ending starts the delays over. */
const STEADY_MS = 60_000
/** How long a stop waits for the process to finish its attempts and writes before killing it. */
const STOP_TIMEOUT_MS = 10_000

const ENTRY = fileURLToPath(new URL('../delivery.ts', import.meta.url))

export interface DeliveryProcess {
  /** The running process's id (undefined between an exit and its restart). */
  readonly pid: number | undefined
  /** What was started, for the server's log line. */
  readonly summary: string
  /** SIGTERM, and SIGKILL if it has not ended within 10 s; no restart after. */
  stop(): Promise<void>
}

/**
 * Starts `server/delivery.ts` beside this server, with this process's environment, at niceness
 * `niceness` where the `nice` command exists (`WEBHOOK_DELIVERY_NICE`, 19 by default, the lowest
 * priority: Linux gives it about 1.5% of a core that anything else wants; every thread the process
 * starts inherits it), its output on this server's. If it ends while the server runs it is started
 * again, after 1 s, then 2, 5, 10 and 30 s between tries while it keeps ending within a minute.
 * Its standard input is a pipe this process never writes: it closes when this process ends,
 * however it ends, and the delivery process stops then (a `kill -9` of the server leaves no
 * worker behind).
 */
export function startDeliveryProcess(niceness: number): DeliveryProcess {
  const nice = Bun.which('nice')
  const command = [...(nice ? [nice, '-n', String(niceness)] : []), process.execPath, ENTRY]
  let child: Subprocess<'pipe', 'inherit', 'inherit'> | undefined
  let stopped = false
  let failures = 0
  let restartTimer: ReturnType<typeof setTimeout> | undefined

  const start = () => {
    const startedAt = performance.now()
    const current = Bun.spawn(command, { env: process.env, stdin: 'pipe', stdout: 'inherit', stderr: 'inherit' })
    child = current
    void current.exited.then((code) => {
      if (child === current) child = undefined
      if (stopped) return
      failures = performance.now() - startedAt >= STEADY_MS ? 0 : failures + 1
      const delayMs = RESTART_DELAYS_MS[Math.min(Math.max(failures - 1, 0), RESTART_DELAYS_MS.length - 1)]!
      console.error(`kassa: the webhook delivery process ended (${current.signalCode ?? `exit code ${code}`}); starting it again in ${delayMs / 1000} s`)
      restartTimer = setTimeout(() => {
        restartTimer = undefined
        if (!stopped) start()
      }, delayMs)
    })
  }
  start()

  return {
    get pid() {
      return child?.pid
    },
    summary: `a process of its own${nice ? ` at nice ${niceness}` : ' (no `nice` on this system: at normal priority)'}`,
    async stop() {
      stopped = true
      if (restartTimer !== undefined) clearTimeout(restartTimer)
      const current = child
      if (current === undefined || current.exitCode !== null || current.signalCode !== null) return
      current.kill('SIGTERM')
      const ended = await Promise.race([current.exited.then(() => true), Bun.sleep(STOP_TIMEOUT_MS).then(() => false)])
      if (!ended) {
        current.kill('SIGKILL')
        await current.exited
      }
    },
  }
}
