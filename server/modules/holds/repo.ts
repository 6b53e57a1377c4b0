import { and, eq } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { holds } from '../../../db/schema/index.ts'

export type HoldRecord = typeof holds.$inferSelect

export async function findHold(executor: Executor, orgId: string, id: string): Promise<HoldRecord | undefined> {
  const [row] = await executor.select().from(holds).where(and(eq(holds.orgId, orgId), eq(holds.id, id)))
  return row
}
