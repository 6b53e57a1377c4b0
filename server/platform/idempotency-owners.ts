import { sql } from 'drizzle-orm'
import { queryRows, type Database } from '../../db/client.ts'

// Who claims Idempotency-Keys: this process's owner id, and whether another claim's process still
// runs (idempotency.ts takes over a claim whose owner is gone).

/**
 * Who claims keys in this process, and whether the process that made another claim still runs: on
 * Postgres each process holds a session advisory lock named by its id for its whole life, and a
 * claim's owner is alive while that lock is held; the embedded database has one process, so any
 * other owner is a process that is gone.
 */
export interface Owners {
  readonly id: string
  /** Resolves once other processes can see this one alive (before its first claim is written). */
  ready(): Promise<void>
  alive(owner: string): Promise<boolean>
}

export const LONE_PROCESS: Owners = { id: newOwnerId(), ready: async () => {}, alive: async () => false }

/** This process's `Owners` on its database: see `Owners`. */
export function ownersOf(database: { db: Database; holdSessionLock?(classId: number, objectId: number): Promise<boolean> }): Owners {
  const { holdSessionLock } = database
  if (holdSessionLock === undefined) return { id: newOwnerId(), ready: async () => {}, alive: async () => false }
  let id = newOwnerId()
  let locked: Promise<void> | undefined
  const lock = async () => {
    // Another session holding the lock means two owner ids of one hash: this process takes another id.
    for (let attempt = 0; attempt < 5; attempt++) {
      if (await holdSessionLock.call(database, OWNER_LOCK_CLASS, ownerLockKey(id))) return
      id = newOwnerId()
    }
    throw new Error('idempotency: could not take an owner lock of its own')
  }
  return {
    get id() {
      return id
    },
    ready() {
      locked ??= lock().catch((error: unknown) => {
        locked = undefined
        throw error
      })
      return locked
    },
    async alive(owner) {
      const [row] = await queryRows<{ held: boolean }>(
        database.db,
        sql`select exists (select 1 from pg_locks where locktype = 'advisory' and classid = ${OWNER_LOCK_CLASS}::oid and objid = ${ownerLockKey(owner)}::oid and objsubid = 2 and granted) as held`,
      )
      return row?.held === true
    },
  }
}

/** The two 32-bit halves of an owner's advisory lock: a fixed class, and the owner id's hash. */
export const OWNER_LOCK_CLASS = 0x4b61_7361
export function ownerLockKey(owner: string): number {
  let hash = 0x811c9dc5
  for (let index = 0; index < owner.length; index++) hash = Math.imul(hash ^ owner.charCodeAt(index), 0x01000193)
  return hash & 0x7fffffff
}

export function newOwnerId(): string {
  return `own_${crypto.randomUUID().replaceAll('-', '')}`
}
