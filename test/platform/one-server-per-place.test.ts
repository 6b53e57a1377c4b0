import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DataFolderInUse, FOLDER_LOCK_FILE, lockDataFolder } from '../../db/folder-lock.ts'
import { spawnServerProcess, startServerProcess } from '../support/server-process.ts'

const scratch = mkdtempSync(join(tmpdir(), 'kassa-one-server-'))
afterAll(() => rmSync(scratch, { recursive: true, force: true }))

/** The id of a process that has come and gone. */
async function deadPid(): Promise<number> {
  const child = Bun.spawn(['true'])
  await child.exited
  return child.pid
}

/** Starts `bun server/main.ts` expecting it to refuse to start: its exit code and what it printed (killed after 30 s). */
async function refusedStart(env: Record<string, string>): Promise<{ code: number; output: string }> {
  const child = spawnServerProcess({ DATABASE_URL: '', ...env })
  // One that starts after all is stopped, so the test fails rather than waits.
  const stop = setTimeout(() => child.kill(9), 30_000)
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  clearTimeout(stop)
  return { code, output: out + err }
}

describe('the embedded data folder lock', () => {
  test('taken once: a second taker is refused with the folder and the holder named, until it is released', () => {
    const folder = join(scratch, 'held')
    mkdirSync(folder)
    const release = lockDataFolder(folder)
    expect(readFileSync(join(folder, FOLDER_LOCK_FILE), 'utf8').trim()).toBe(String(process.pid))
    let refusal: unknown
    try {
      lockDataFolder(folder)
    } catch (error) {
      refusal = error
    }
    expect(refusal).toBeInstanceOf(DataFolderInUse)
    expect(refusal).toMatchObject({ path: folder, pid: process.pid })
    expect((refusal as Error).message).toContain(`in use by process ${process.pid}`)
    release()
    expect(existsSync(join(folder, FOLDER_LOCK_FILE))).toBe(false)
    lockDataFolder(folder)()
  })

  test('held by another live process: refused; left by one that is gone, or unreadable: taken over', async () => {
    const folder = join(scratch, 'others')
    mkdirSync(folder)
    const file = join(folder, FOLDER_LOCK_FILE)
    const sleeper = Bun.spawn(['sleep', '30'])
    try {
      writeFileSync(file, `${sleeper.pid}\n`)
      expect(() => lockDataFolder(folder)).toThrow(DataFolderInUse)
      expect(readFileSync(file, 'utf8').trim()).toBe(String(sleeper.pid))
    } finally {
      sleeper.kill()
      await sleeper.exited
    }
    for (const leftover of [`${await deadPid()}\n`, 'not a pid', '']) {
      writeFileSync(file, leftover)
      const release = lockDataFolder(folder)
      expect(readFileSync(file, 'utf8').trim()).toBe(String(process.pid))
      release()
    }
    // A release does not remove a lock another process has taken since.
    const release = lockDataFolder(folder)
    writeFileSync(file, `${sleeper.pid}\n`)
    release()
    expect(existsSync(file)).toBe(true)
  })
})

describe('one server per data folder and per port', () => {
  test('a second server on the same embedded folder, or on the same port, refuses to start and says why; the first keeps serving, and a folder left by a killed server is taken over', async () => {
    const dataDir = join(scratch, 'server')
    const first = await startServerProcess({ DATABASE_URL: '', DATA_DIR: dataDir })
    let again: Awaited<ReturnType<typeof startServerProcess>> | undefined
    try {
      const lock = join(dataDir, 'pglite', FOLDER_LOCK_FILE)
      expect(readFileSync(lock, 'utf8').trim()).toBe(String(first.child.pid))

      const sameFolder = await refusedStart({ DATA_DIR: dataDir, PORT: '0' })
      expect(sameFolder.code).toBe(1)
      expect(sameFolder.output).toContain(`is in use by process ${first.child.pid}`)
      expect(sameFolder.output).not.toContain('listening on')

      const port = new URL(first.baseUrl).port
      const samePort = await refusedStart({ DATA_DIR: join(scratch, 'elsewhere'), PORT: port })
      expect(samePort.code).toBe(1)
      expect(samePort.output).toContain(`could not listen on 127.0.0.1:${port}`)
      // The refused server let go of its own folder.
      expect(existsSync(join(scratch, 'elsewhere', 'pglite', FOLDER_LOCK_FILE))).toBe(false)

      expect((await fetch(`${first.baseUrl}/health`)).status).toBe(200)
      await first.kill9()
      // The lock names a process that is gone: the next server takes the folder.
      expect(existsSync(lock)).toBe(true)
      again = await startServerProcess({ DATABASE_URL: '', DATA_DIR: dataDir })
      expect((await fetch(`${again.baseUrl}/health`)).status).toBe(200)
      expect(readFileSync(lock, 'utf8').trim()).toBe(String(again.child.pid))
      await again.stop()
      again = undefined
      expect(existsSync(lock)).toBe(false)
    } finally {
      await first.kill9()
      await again?.kill9()
    }
  }, 120_000)
})
