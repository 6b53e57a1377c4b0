import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'

/** The file in an embedded data folder that names the process using it. */
export const FOLDER_LOCK_FILE = 'kassa.lock'

/** Another live process holds the embedded data folder. */
export class DataFolderInUse extends Error {
  constructor(
    readonly path: string,
    readonly pid: number,
  ) {
    super(
      `the embedded database at ${path} is in use by process ${pid} (another Kassa server?). ` +
        `Stop it, or give this one its own DATA_DIR. If no such process is Kassa, remove ${join(path, FOLDER_LOCK_FILE)}.`,
    )
    this.name = 'DataFolderInUse'
  }
}

/**
 * Takes the embedded data folder `path` for this process, or throws `DataFolderInUse` if a live
 * process holds it. PGlite does not lock its folder (its `postmaster.pid` names no process), so two
 * servers started on one folder would both open it, each with its own buffers over the same files,
 * and corrupt it. The lock is a file created exclusively, holding this process' id; one left by a
 * process that is gone (killed, crashed) is taken over. Returns the release, which removes the file
 * while it still names this process.
 */
export function lockDataFolder(path: string): () => void {
  const file = join(path, FOLDER_LOCK_FILE)
  for (let attempt = 0; ; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o600)
      try {
        writeSync(fd, `${process.pid}\n`)
      } finally {
        closeSync(fd)
      }
      return () => {
        if (holderOf(file) === process.pid) rmSync(file, { force: true })
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw error
    }
    const holder = holderOf(file)
    if (holder === process.pid || (holder !== undefined && isAlive(holder))) throw new DataFolderInUse(path, holder)
    // Left by a process that is gone, or unreadable (a crash while it was written): taken over.
    rmSync(file, { force: true })
  }
}

function holderOf(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim())
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}
