import { appendFileSync } from 'node:fs'
import { heapStats } from 'bun:jsc'

/** One answer of the probe, a JSON line in its file. */
export interface MemorySample {
  /** Resident memory just before the collection, as the operating system saw it. */
  rssBeforeMb: number
  /** Resident memory after a full collection and giving freed pages back: what the process keeps. */
  rssMb: number
  /** The JavaScript heap after the collection, and the objects live in it. */
  heapMb: number
  objects: number
  /** Memory the runtime allocates for the heap's objects outside it (string and buffer contents). */
  externalMb: number
}

const MB = 1024 * 1024

/**
 * For the tail benchmark only: with `KASSA_CONSOLE_MEMORY_PROBE` naming a file, each SIGUSR2 makes
 * the console run a full garbage collection, give the freed pages back to the system, and append a `MemorySample` to that file. The runtime
 * collects when it sees fit, so resident memory sampled from outside mixes what the console keeps
 * with garbage not yet collected; after a full collection it is what the console keeps. Without the
 * variable nothing is installed.
 */
export function installMemoryProbe(env: Record<string, string | undefined>): void {
  const path = env.KASSA_CONSOLE_MEMORY_PROBE
  if (path === undefined || path === '') return
  process.on('SIGUSR2', () => {
    const rssBeforeMb = process.memoryUsage.rss() / MB
    Bun.gc(true)
    // Freed pages go back to the system lazily; give them back now, so what remains resident is what is kept.
    Bun.shrink()
    const heap = heapStats()
    const usage = process.memoryUsage()
    const sample: MemorySample = {
      rssBeforeMb: Math.round(rssBeforeMb),
      rssMb: Math.round(usage.rss / MB),
      heapMb: Math.round(heap.heapSize / MB),
      objects: heap.objectCount,
      externalMb: Math.round(usage.external / MB),
    }
    appendFileSync(path, `${JSON.stringify(sample)}\n`)
  })
}
