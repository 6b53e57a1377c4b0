import { newId } from '../lib/ids.ts'
import type { EventRow } from './writer.ts'

/**
 * An event row for the writer's batch. It has the same shape `appendEvent` writes; the writer
 * inserts a whole batch of them in one statement inside the commit that makes the change.
 */
export function eventRow(orgId: string, type: string, data: Record<string, unknown>, created: Date): EventRow {
  return { id: newId('evt'), orgId, type, data, createdAt: created }
}
