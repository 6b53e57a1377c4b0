import { events } from '../../../db/schema/index.ts'
import { newId } from '../../lib/ids.ts'
import { defineWriteSet } from '../../ledger/write-sets.ts'

export type EventRow = typeof events.$inferInsert

declare module '../../ledger/write-sets.ts' {
  interface WriteSetRows {
    /** Events written in the commit that makes the change they describe (the outbox). */
    events: EventRow
  }
}

/** Events go last, in queue order: plain inserts, each id new. */
export const eventWriteSets = [defineWriteSet({ name: 'events', field: 'events', table: events, order: 100 })]

/**
 * An event row for the writer's batch. It has the same shape `appendEvent` writes; the writer
 * inserts a whole batch of them in one statement inside the commit that makes the change.
 */
export function eventRow(orgId: string, type: string, data: Record<string, unknown>, created: Date): EventRow {
  return { id: newId('evt'), orgId, type, data, createdAt: created }
}
