import { integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core'

const at = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' })

/**
 * Who serves this database (`db/serving-lock.ts`): written by the process that holds the serving
 * lock once it listens, read by a second server that is refused, to name the holder. A row is
 * current only while the Postgres session `backend_pid` holds the lock.
 */
export const servingInstance = pgTable('serving_instance', {
  lockName: text('lock_name').primaryKey(),
  backendPid: integer('backend_pid').notNull(),
  host: text('host').notNull(),
  pid: integer('pid').notNull(),
  startedAt: at('started_at').notNull(),
  listen: text('listen').notNull(),
  announcedAt: at('announced_at').notNull(),
})
