/**
 * A child process that runs PGlite's initdb (or the migrations on a template) and exits, so the
 * process that serves never holds initdb's memory. PGlite keeps what initdb allocated (WebAssembly
 * memory and copies of it, about 1 GB in all) for as long as the process lives, closed or not,
 * where a data directory that is already initialized opens with about 390 MB. The engine counts
 * that memory in its heap and sizes its collections by it, so the serving process would also let
 * garbage grow by about as much between collections (docs/architecture.md, "The embedded
 * database's memory").
 *
 *   bun db/pglite-init.ts dir <folder>    initializes the data directory in <folder>
 *   bun db/pglite-init.ts template <file> writes an initialized data directory to <file> (a tar),
 *                                          which an in-memory database loads instead of running initdb
 *   bun db/pglite-init.ts migrated <file> <base> <migrations>
 *                                          writes the data directory of <base> (a template) with the
 *                                          migrations in the folder <migrations> applied to <file>
 *
 * A template is written under a temporary name and renamed into place, so a reader never sees
 * half of one. Called by `db/pglite-template.ts`; nothing else needs it.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { dirname } from 'node:path'
import { PGlite } from '@electric-sql/pglite'
import { drizzle } from 'drizzle-orm/pglite'
import { migrate } from 'drizzle-orm/pglite/migrator'

const [mode, target, base, migrations] = process.argv.slice(2)
const usage = 'usage: bun db/pglite-init.ts dir <folder> | template <file> | migrated <file> <base> <migrations>'
if ((mode !== 'dir' && mode !== 'template' && mode !== 'migrated') || target === undefined || target === '') {
  console.error(usage)
  process.exit(2)
}
if (mode === 'migrated' && (base === undefined || migrations === undefined)) {
  console.error(usage)
  process.exit(2)
}

/**
 * Drops the two template databases initdb makes beside `postgres`, the one database PGlite opens:
 * an embedded database never creates another, so they were 14 MB of each data folder and of each
 * in-memory database a test file loads.
 */
async function dropTemplateDatabases(database: PGlite): Promise<void> {
  for (const name of ['template0', 'template1']) {
    await database.exec(`update pg_database set datistemplate = false, datallowconn = true where datname = '${name}'`)
    await database.exec(`drop database ${name}`)
  }
}

/**
 * Writes what `make` builds to `path` through a scratch file renamed into place, after a checkpoint,
 * so a database loaded from it starts without replaying the write-ahead log.
 */
async function writeTemplate(path: string, make: () => Promise<PGlite>): Promise<void> {
  mkdirSync(dirname(path), { recursive: true })
  const scratch = `${path}.${process.pid}.tmp`
  try {
    const database = await make()
    await database.exec('checkpoint')
    const dump = await database.dumpDataDir('none')
    await database.close()
    await Bun.write(scratch, dump)
    renameSync(scratch, path)
  } finally {
    if (existsSync(scratch)) rmSync(scratch)
  }
}

if (mode === 'dir') {
  // In place, as PGlite would have done it in the serving process.
  const database = await PGlite.create(target)
  await database.close()
} else if (mode === 'template') {
  await writeTemplate(target, async () => {
    const database = await PGlite.create()
    await dropTemplateDatabases(database)
    return database
  })
} else {
  await writeTemplate(target, async () => {
    const database = await PGlite.create({ loadDataDir: Bun.file(base!) })
    await migrate(drizzle(database), { migrationsFolder: migrations! })
    return database
  })
}
process.exit(0)
