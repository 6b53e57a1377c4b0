/**
 * `npm test`: the whole suite on one worker per core, then the few files whose assertions are about
 * real time on a machine left to them.
 *
 * - Phase 1 runs every other file with `bun test --parallel --no-isolate`: each worker keeps its
 *   modules from file to file (PGlite's engine is compiled once per worker), and `test/timings.json`
 *   makes the slowest files start first, so no long file starts last.
 * - Phase 2 runs `QUIET` one after another with nothing else running: they measure the event loop's
 *   lateness, shed load by it, or race a timer against a commit, and a busy second worker makes a
 *   machine of two cores late by more than any bound such a test can set.
 *
 * Prints what bun prints for each phase, then one summary in bun's own form (` N pass`, ` N skip`,
 * ` N fail`), which `.ci/run` reads. Arguments (a file, a folder, bun's options) go to one plain
 * `bun test` instead. `npm run test:timings` writes `test/timings.json` again from a run.
 */
import { Glob } from 'bun'
import { resolve } from 'node:path'

const REPO_ROOT = resolve(import.meta.dir, '..')
const TIMINGS = 'test/timings.json'
const TIMEOUT = ['--timeout', '60000']

/** Files whose assertions are about real time: run alone, after the rest. */
const QUIET = ['test/platform/loop-lag.test.ts', 'test/platform/load-shedder.test.ts']

interface Counts {
  pass: number
  skip: number
  fail: number
  files: number
}

/** Runs bun with `args`, its output printed as it comes and kept; its exit code and output. */
async function run(args: string[]): Promise<{ code: number; output: string }> {
  const child = Bun.spawn([process.execPath, ...args], { cwd: REPO_ROOT, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  const chunks: string[] = []
  const pipe = async (stream: ReadableStream<Uint8Array>, to: NodeJS.WriteStream) => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) {
      const text = decoder.decode(chunk, { stream: true })
      chunks.push(text)
      to.write(text)
    }
  }
  await Promise.all([pipe(child.stdout, process.stdout), pipe(child.stderr, process.stderr)])
  return { code: await child.exited, output: chunks.join('') }
}

/** The counts bun printed last in `output` (its summary). */
function countsOf(output: string): Counts {
  const last = (pattern: RegExp) => {
    const found = [...output.matchAll(pattern)]
    return found.length === 0 ? 0 : Number(found.at(-1)![1])
  }
  return {
    pass: last(/^ *(\d+) pass$/gm),
    skip: last(/^ *(\d+) skip$/gm),
    fail: last(/^ *(\d+) fail$/gm),
    files: last(/^Ran \d+ tests? across (\d+) files?\./gm),
  }
}

/** Every test file under `test/`, as a path from the repository's root. */
function testFiles(): string[] {
  return [...new Glob('test/**/*.test.{ts,tsx}').scanSync({ cwd: REPO_ROOT })].sort()
}

async function main(): Promise<number> {
  const args = process.argv.slice(2)
  if (args.length > 0 && args[0] !== '--update-timings') return (await run(['test', ...TIMEOUT, ...args])).code
  const updateTimings = args[0] === '--update-timings'
  const files = testFiles()
  const missing = QUIET.filter((path) => !files.includes(path))
  if (missing.length > 0) throw new Error(`test/run.ts names files that do not exist: ${missing.join(', ')}`)
  const started = performance.now()
  const together = files.filter((path) => !QUIET.includes(path))
  const first = await run(['test', ...TIMEOUT, '--parallel', '--no-isolate', `--timings=${TIMINGS}`, ...(updateTimings ? ['--update-timings'] : []), ...together.map((path) => `./${path}`)])
  console.log('\n=== the files about real time, alone ===')
  const second = await run(['test', ...TIMEOUT, ...QUIET.map((path) => `./${path}`)])
  const counts = [countsOf(first.output), countsOf(second.output)]
  const total = (key: keyof Counts) => counts.reduce((sum, each) => sum + each[key], 0)
  const failed = first.code !== 0 || second.code !== 0
  console.log(`\nnpm test: ${together.length} files in parallel, then ${QUIET.length} alone, in ${((performance.now() - started) / 1000).toFixed(1)} s`)
  console.log(` ${total('pass')} pass`)
  console.log(` ${total('skip')} skip`)
  console.log(` ${total('fail') === 0 && failed ? 1 : total('fail')} fail`)
  console.log(`Ran ${total('pass') + total('skip') + total('fail')} tests across ${total('files')} files.`)
  return failed ? 1 : 0
}

if (import.meta.main) process.exit(await main())
