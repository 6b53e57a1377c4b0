import type { Executor } from '../../../db/client.ts'
import { events } from '../../../db/schema/index.ts'
import { newId } from '../../lib/ids.ts'

export interface NewEvent {
  /** Null only for platform-wide `vault.*` events. */
  orgId: string | null
  type: string
  data: Record<string, unknown>
  /** The organization's clock at the change; the log is ordered by commit, not by this. */
  created: Date
}

/**
 * Events are written on the caller's transaction, so an event exists exactly when the change it
 * describes committed (the outbox pattern). Delivery reads them only after commit.
 */
export async function appendEvent(executor: Executor, event: NewEvent): Promise<string> {
  const id = newId('evt')
  await executor.insert(events).values({
    id,
    orgId: event.orgId,
    type: event.type,
    data: event.data,
    createdAt: event.created,
  })
  return id
}
