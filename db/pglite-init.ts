/**
 * A child process that runs PGlite's initdb and exits, so the process that serves never holds
 * initdb's memory. PGlite keeps what initdb allocated (WebAssembly memory and copies of it, about
 * 1 GB in all) for as long as the process lives, closed or not, where a data directory that is
 * already initialized opens with about 390 MB. The engine counts that memory in its heap and sizes
 * its collections by it, so the serving process would also let garbage grow by about as much
 * between collections (docs/architecture.md, "The embedded database's memory").
 *
 *   bun db/pglite-init.ts dir <folder>    initializes the data directory in <folder>
 *   bun db/pglite-init.ts template <file> writes an initialized data directory to <file> (a tar),
 *                                          which an in-memory database loads instead of running initdb
 *
 * The template is written under a temporary name and renamed into place, so a reader never sees
 * half of one. Called by `db/client.ts`; nothing else needs it.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { dirname } from 'node:path'
import { PGlite } from '@electric-sql/pglite'

const [mode, target] = process.argv.slice(2)
if ((mode !== 'dir' && mode !== 'template') || target === undefined || target === '') {
  console.error('usage: bun db/pglite-init.ts dir <folder> | template <file>')
  process.exit(2)
}
if (mode === 'dir') {
  // In place, as PGlite would have done it in the serving process.
  const database = await PGlite.create(target)
  await database.close()
} else {
  mkdirSync(dirname(target), { recursive: true })
  const scratch = `${target}.${process.pid}.tmp`
  try {
    const database = await PGlite.create()
    const dump = await database.dumpDataDir('none')
    await database.close()
    await Bun.write(scratch, dump)
    renameSync(scratch, target)
  } finally {
    if (existsSync(scratch)) rmSync(scratch)
  }
}
process.exit(0)
