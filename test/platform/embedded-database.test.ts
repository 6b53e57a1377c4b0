import { afterAll, describe, expect, test } from 'bun:test'
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'drizzle-orm'
import { EMBEDDED_IN_MEMORY, migrationsFolder, openDatabase, openPgliteFromTemplate, queryRows } from '../../db/client.ts'
import { migrationsHash, pruneTemplates } from '../../db/pglite-template.ts'

const scratch = mkdtempSync(join(tmpdir(), 'kassa-embedded-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

const CLIENT = join(import.meta.dir, '..', '..', 'db', 'client.ts')

/** Runs `script` in a Bun process of its own (from the scratch folder); its output and exit code. */
async function runScript(script: string): Promise<{ out: string; err: string; code: number }> {
  const child = Bun.spawn([process.execPath, '-e', script], { cwd: scratch, stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { out, err, code }
}

/**
 * Opens the embedded database at `path` in a process of its own (this one holds many databases
 * already), runs the migrations, reads and writes, and reports the engine's count of memory
 * outside its heap (WebAssembly memory and buffers, which PGlite's are).
 */
async function openInChild(path: string, write: string | undefined): Promise<{ extraMemoryMb: number; rows: string[] }> {
  const script = `
    import { heapStats } from 'bun:jsc'
    import { openDatabase, runMigrations, queryRows } from ${JSON.stringify(CLIENT)}
    import { sql } from 'drizzle-orm'
    const handle = await openDatabase({ databaseUrl: undefined, embeddedPath: ${JSON.stringify(path)}, poolMax: 1 })
    await runMigrations(handle, undefined)
    await handle.db.execute(sql\`create table if not exists kept (note text)\`)
    ${write === undefined ? '' : `await handle.db.execute(sql\`insert into kept values (\${${JSON.stringify(write)}})\`)`}
    const rows = await queryRows(handle.db, sql\`select note from kept order by note\`)
    Bun.gc(true)
    const extraMemoryMb = heapStats().extraMemorySize / 1048576
    await handle.close()
    console.log(JSON.stringify({ extraMemoryMb, rows: rows.map((row) => row.note) }))
  `
  const { out, err, code } = await runScript(script)
  expect({ code, err: code === 0 ? '' : err }).toEqual({ code: 0, err: '' })
  return JSON.parse(out.trim().split('\n').at(-1)!) as { extraMemoryMb: number; rows: string[] }
}

/** The first migration the journal in `folder` names, as its file name. */
function firstMigrationFile(folder: string): string {
  const journal = JSON.parse(readFileSync(join(folder, 'meta', '_journal.json'), 'utf8')) as { entries: Array<{ tag: string }> }
  return `${journal.entries[0]!.tag}.sql`
}

describe('the embedded database', () => {
  test('a new folder starts from the migrated template (initdb never runs in the server), and the data stays across opens', async () => {
    const folder = join(scratch, 'data')
    const first = await openInChild(folder, 'first')
    expect(existsSync(join(folder, 'PG_VERSION'))).toBe(true)
    expect(first.rows).toEqual(['first'])
    // Initialized in this process, PGlite holds about 1,073 MB; opened initialized, about 390.
    expect(first.extraMemoryMb).toBeLessThan(600)
    const second = await openInChild(folder, 'second')
    expect(second.rows).toEqual(['first', 'second'])
    expect(second.extraMemoryMb).toBeLessThan(600)
  }, 60_000)

  test('an in-memory database starts from the template, without initdb memory, and is empty of data each time', async () => {
    const opened = await openInChild('memory://', 'only this one')
    expect(opened.rows).toEqual(['only this one'])
    expect(opened.extraMemoryMb).toBeLessThan(600)
    const again = await openInChild('memory://', undefined)
    expect(again.rows).toEqual([])
  }, 60_000)

  test('a new database starts with every migration applied, from a template named by the migrations, holding no database but its own; a bare one has none', async () => {
    const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as { entries: unknown[] }
    const migrated = await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1 })
    const applied = await queryRows<{ count: number }>(migrated.db, sql`select count(*)::int as count from drizzle.__drizzle_migrations`)
    // Only the database PGlite opens: initdb's template databases are not carried in the template.
    const databases = await queryRows<{ name: string }>(migrated.db, sql`select datname as name from pg_database order by datname`)
    await migrated.close()
    expect(applied).toEqual([{ count: journal.entries.length }])
    expect(databases).toEqual([{ name: 'postgres' }])

    const bare = await openDatabase({ databaseUrl: undefined, embeddedPath: EMBEDDED_IN_MEMORY, poolMax: 1, bare: true })
    const tables = await queryRows<{ name: string }>(bare.db, sql`select table_name as name from information_schema.tables where table_schema in ('public', 'drizzle')`)
    await bare.close()
    expect(tables).toEqual([])

    // A migration changed after its template was made names another template.
    const changed = join(scratch, 'migrations')
    cpSync(migrationsFolder, changed, { recursive: true })
    expect(migrationsHash(changed)).toBe(migrationsHash(migrationsFolder))
    appendFileSync(join(changed, firstMigrationFile(changed)), '\n-- changed\n')
    expect(migrationsHash(changed)).not.toBe(migrationsHash(migrationsFolder))
  }, 60_000)

  test('a new migrated template removes other templates but the newest two migrated ones and the newest other initdb one', () => {
    const folder = join(scratch, 'pruned')
    mkdirSync(folder, { recursive: true })
    const at = (minutesAgo: number) => new Date(Date.now() - minutesAgo * 60_000)
    const names = ['migrated-0.5.16-f2-aaaa.tar', 'migrated-0.5.16-f2-bbbb.tar', 'migrated-0.5.16-cccc.tar', 'migrated-0.5.15-dddd.tar', 'datadir-0.5.16.tar', 'datadir-0.5.15.tar']
    names.forEach((name, index) => {
      writeFileSync(join(folder, name), 'tar')
      utimesSync(join(folder, name), at(10 * (index + 1)), at(10 * (index + 1)))
    })
    const currentInitdb = join(folder, 'datadir-0.5.16-f2.tar')
    writeFileSync(currentInitdb, 'tar')
    utimesSync(currentInitdb, at(100), at(100))
    const current = join(folder, 'migrated-0.5.16-f2-eeee.tar')
    writeFileSync(current, 'tar')
    pruneTemplates(current, currentInitdb, folder)
    expect(readdirSync(folder).sort()).toEqual(['datadir-0.5.16-f2.tar', 'datadir-0.5.16.tar', 'migrated-0.5.16-f2-aaaa.tar', 'migrated-0.5.16-f2-bbbb.tar', 'migrated-0.5.16-f2-eeee.tar'])
  })

  test('a missing template is made; a damaged one is made again', async () => {
    const template = join(scratch, 'templates', 'datadir.tar')
    const made = await openPgliteFromTemplate(template)
    expect((await made.query<{ one: number }>('select 1 as one')).rows).toEqual([{ one: 1 }])
    await made.close()
    const size = statSync(template).size
    expect(size).toBeGreaterThan(1_000_000)

    writeFileSync(template, 'not a tar file')
    const remade = await openPgliteFromTemplate(template)
    expect((await remade.query<{ one: number }>('select 1 as one')).rows).toEqual([{ one: 1 }])
    await remade.close()
    expect(statSync(template).size).toBe(size)
  }, 60_000)

  test('where no template can be made, an in-memory database still opens, running its own initdb, and says so', async () => {
    const blocker = join(scratch, 'not-a-folder')
    writeFileSync(blocker, 'a file where the template folder would go')
    const script = `
      import { openPgliteFromTemplate } from ${JSON.stringify(CLIENT)}
      for (const round of [1, 2]) {
        const database = await openPgliteFromTemplate(${JSON.stringify(join(blocker, 'datadir.tar'))})
        const { rows } = await database.query('select 1 as one')
        console.log(JSON.stringify({ round, rows }))
        await database.close()
      }
    `
    const { out, err, code } = await runScript(script)
    expect(code).toBe(0)
    expect(out.trim().split('\n').map((line) => JSON.parse(line))).toEqual([
      { round: 1, rows: [{ one: 1 }] },
      { round: 2, rows: [{ one: 1 }] },
    ])
    // One attempt to make the template (its child's error, once) and one warning: the second
    // database went straight to its own initdb.
    expect(err.match(/code: "(EEXIST|ENOTDIR)"/g)?.length).toBe(1)
    expect(err.match(/no template for the embedded database/g)?.length).toBe(1)
  }, 60_000)
})
