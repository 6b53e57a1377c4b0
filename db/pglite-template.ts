/**
 * The data directories an embedded database starts from, so that no process pays initdb, or the
 * migrations, more than once per machine. Two templates, each a tar of a data directory kept in the
 * system's temporary folder and made by a child process (`db/pglite-init.ts`), which keeps initdb's
 * memory out of the process that serves:
 * - the initdb template: a bare initialized data directory, named by the PGlite version;
 * - the migrated template: the same with the project's migrations applied, named by the PGlite
 *   version and a hash of the migrations, so a changed or added migration makes a new one and two
 *   checkouts with different migrations never share one.
 * An in-memory database loads a template instead of running initdb and the migrations (each test
 * file builds its own database: about a second saved on each); a new data folder is written from
 * the migrated template, so a first start is as quick as a restart (docs/architecture.md, "The
 * embedded database's memory").
 */
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { PGlite } from '@electric-sql/pglite'

const PGLITE_DIST = dirname(Bun.resolveSync('@electric-sql/pglite', import.meta.dir))

let pgliteVersionRead: string | undefined

/** The installed PGlite's version: a template made by one version is not loaded by another. */
function pgliteVersion(): string {
  pgliteVersionRead ??= (JSON.parse(readFileSync(join(PGLITE_DIST, '..', 'package.json'), 'utf8')) as { version: string }).version
  return pgliteVersionRead
}

/** Where the templates are kept. */
export function templateFolder(): string {
  return join(tmpdir(), 'kassa-pglite')
}

/**
 * How a template is made (`db/pglite-init.ts`), in every template's name: a change to it (2: a
 * checkpoint before the dump, without the template databases) makes new ones rather than reusing
 * those an earlier way made.
 */
const TEMPLATE_FORMAT = 2

/** The bare initialized data directory, named by the PGlite that made it. */
export function initdbTemplatePath(): string {
  return join(templateFolder(), `datadir-${pgliteVersion()}-f${TEMPLATE_FORMAT}.tar`)
}

/**
 * A hash of the migrations in `folder` (the journal and each file it names, in its order), so a
 * template records exactly which migrations it holds.
 */
export function migrationsHash(folder: string): string {
  const hash = createHash('sha256')
  const journalText = readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')
  hash.update(journalText)
  for (const entry of (JSON.parse(journalText) as { entries: Array<{ tag: string }> }).entries) {
    hash.update(entry.tag)
    hash.update(readFileSync(join(folder, `${entry.tag}.sql`)))
  }
  return hash.digest('hex').slice(0, 16)
}

/** The migrated data directory for the migrations in `migrationsFolder`. */
export function migratedTemplatePath(migrationsFolder: string): string {
  return join(templateFolder(), `migrated-${pgliteVersion()}-f${TEMPLATE_FORMAT}-${migrationsHash(migrationsFolder)}.tar`)
}

/**
 * Templates of each kind kept besides the current one, the newest first (another checkout, with
 * other migrations or another PGlite, may use them again): migrated ones, initdb ones.
 */
const OTHERS_KEPT = { migrated: 2, initdb: 1 }

/**
 * Once the migrated template `current` was made from the initdb template `currentInitdb`, removes
 * the templates of each kind but those two and the newest others (by when they were written):
 * without it each change of the migrations, of PGlite or of how templates are made would leave one
 * more tar in the temporary folder. A process reading one keeps its open file; one that finds its
 * template gone makes it again.
 */
export function pruneTemplates(current: string, currentInitdb: string, folder = templateFolder()): void {
  try {
    const names = readdirSync(folder)
    const prune = (pattern: RegExp, keep: string, kept: number) => {
      const others = names
        .filter((name) => pattern.test(name))
        .map((name) => join(folder, name))
        .filter((path) => path !== keep)
        .map((path) => ({ path, writtenMs: statSync(path).mtimeMs }))
        .sort((left, right) => right.writtenMs - left.writtenMs)
      for (const { path } of others.slice(kept)) rmSync(path, { force: true })
    }
    prune(/^migrated-.*\.tar$/, current, OTHERS_KEPT.migrated)
    prune(/^datadir-.*\.tar$/, currentInitdb, OTHERS_KEPT.initdb)
  } catch {
    // Housekeeping only: a template left behind costs disk space, nothing else.
  }
}

/** Runs `db/pglite-init.ts` with `args` in a child process; throws if it fails. */
export async function runPgliteInit(args: string[]): Promise<void> {
  const child = Bun.spawn([process.execPath, join(import.meta.dir, 'pglite-init.ts'), ...args], { stdout: 'inherit', stderr: 'inherit' })
  const code = await child.exited
  if (code !== 0) throw new Error(`initializing the embedded database (${args.join(' ')}) failed with exit code ${code}`)
}

/**
 * Templates this process has made sure of, by path: each is looked for, or made, once. A template
 * that could not be made stays failed for the life of the process, so later databases go straight
 * to their fallback rather than trying again each time.
 */
const templates = new Map<string, Promise<void>>()

/**
 * Makes sure the template at `path` exists, making it with `make` (a child process) if not; where
 * it cannot be made, says once what is done instead (`fallback`).
 */
export function ensureTemplate(path: string, make: () => Promise<void>, fallback: string): Promise<void> {
  let ready = templates.get(path)
  if (ready === undefined) {
    ready = existsSync(path) ? Promise.resolve() : make()
    // Said once, where it failed; kept as a failure for every later caller.
    ready.catch((error: unknown) => console.warn(`kassa: no template for the embedded database at ${path} (${error instanceof Error ? error.message : String(error)}); ${fallback}`))
    templates.set(path, ready)
  }
  return ready
}

/** Forgets a template this process has seen (one that did not load), so the next use makes it again. */
export function forgetTemplate(path: string): void {
  rmSync(path, { force: true })
  templates.delete(path)
}

let compiledModule: Promise<WebAssembly.Module> | undefined

/**
 * PGlite's engine compiled once per process: every database a process opens (a test process opens
 * dozens) instantiates the same compiled module instead of compiling 9 MB of WebAssembly again.
 */
export function pgliteWasmModule(): Promise<WebAssembly.Module> {
  compiledModule ??= Bun.file(join(PGLITE_DIST, 'pglite.wasm'))
    .arrayBuffer()
    .then((bytes) => WebAssembly.compile(bytes))
  // A failure is not kept: the next database tries again (and says why, if it fails again).
  compiledModule.catch(() => {
    compiledModule = undefined
  })
  return compiledModule
}

/** An in-memory database loaded from the template at `path`; throws if it does not load. */
export async function loadTemplate(path: string): Promise<PGlite> {
  return PGlite.create({ loadDataDir: Bun.file(path), pgliteWasmModule: await pgliteWasmModule() })
}

/**
 * Writes the data directory held by the tar at `tarPath` into `folder` (which holds no data
 * directory yet), under a scratch name renamed into place at the end, so a folder never holds half
 * of one. PGlite's own loader parses the tar in JavaScript and writes through its file system layer,
 * which takes seconds for a folder; this takes a fraction of one.
 */
export function extractTemplate(tarPath: string, folder: string): void {
  const scratch = join(folder, `.template.${process.pid}.tmp`)
  rmSync(scratch, { recursive: true, force: true })
  mkdirSync(scratch, { recursive: true, mode: 0o700 })
  try {
    const tops = new Set<string>()
    for (const entry of readTar(new Uint8Array(readFileSync(tarPath)))) {
      tops.add(entry.path.split('/')[0]!)
      const path = join(scratch, entry.path)
      if (entry.directory) mkdirSync(path, { recursive: true, mode: 0o700 })
      else {
        mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
        writeFileSync(path, entry.data, { mode: 0o600 })
      }
    }
    if (!existsSync(join(scratch, 'PG_VERSION'))) throw new Error(`${tarPath} holds no data directory`)
    // Name by name (the folder already holds the lock file of the process opening it), PG_VERSION
    // last: a folder with it holds a whole data directory. What a write cut short left is replaced.
    tops.delete('PG_VERSION')
    for (const top of [...tops, 'PG_VERSION']) {
      rmSync(join(folder, top), { recursive: true, force: true })
      renameSync(join(scratch, top), join(folder, top))
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
}

interface TarEntry {
  path: string
  directory: boolean
  data: Uint8Array
}

const TAR_BLOCK = 512

/** The entries of a ustar archive (as PGlite's `dumpDataDir` writes them): files and folders. */
function readTar(bytes: Uint8Array): TarEntry[] {
  const decoder = new TextDecoder()
  const field = (start: number, length: number) => {
    let end = start
    while (end < start + length && bytes[end] !== 0) end++
    return decoder.decode(bytes.subarray(start, end))
  }
  const entries: TarEntry[] = []
  let offset = 0
  while (offset + TAR_BLOCK <= bytes.length && bytes[offset] !== 0) {
    const name = field(offset, 100)
    const prefix = field(offset + 345, 155)
    const size = Number.parseInt(field(offset + 124, 12).trim() || '0', 8)
    const type = String.fromCharCode(bytes[offset + 156] ?? 0)
    if (!Number.isFinite(size) || size < 0) throw new Error(`a tar entry at byte ${offset} has no size`)
    const path = (prefix === '' ? name : `${prefix}/${name}`).replace(/^\/+/, '').replace(/\/+$/, '')
    if (path.split('/').includes('..')) throw new Error(`a tar entry leaves its folder: ${path}`)
    offset += TAR_BLOCK
    if (path === '') {
      // The archive's own root folder.
    } else if (type === '5') entries.push({ path, directory: true, data: new Uint8Array() })
    else if (type === '0' || type === '\0') entries.push({ path, directory: false, data: bytes.subarray(offset, offset + size) })
    offset += Math.ceil(size / TAR_BLOCK) * TAR_BLOCK
  }
  return entries
}
