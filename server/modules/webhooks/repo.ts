import { and, asc, count, eq, inArray, isNull, sql } from 'drizzle-orm'
import type { Executor } from '../../../db/client.ts'
import { organizations, webhookDeliveries, webhookEndpoints } from '../../../db/schema/index.ts'

export type WebhookRecord = typeof webhookEndpoints.$inferSelect
export type NewWebhookRecord = typeof webhookEndpoints.$inferInsert

export async function lockOrganization(executor: Executor, orgId: string): Promise<boolean> {
  const rows = await executor.select({ id: organizations.id }).from(organizations).where(eq(organizations.id, orgId)).for('update')
  return rows.length === 1
}

export async function countLiveWebhooks(executor: Executor, orgId: string): Promise<number> {
  const [row] = await executor
    .select({ value: count() })
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.orgId, orgId), isNull(webhookEndpoints.deletedAt)))
  return row?.value ?? 0
}

export async function insertWebhook(executor: Executor, row: NewWebhookRecord): Promise<WebhookRecord> {
  const [inserted] = await executor.insert(webhookEndpoints).values(row).returning()
  return inserted!
}

export async function findLiveWebhook(executor: Executor, orgId: string, id: string): Promise<WebhookRecord | undefined> {
  const [row] = await executor
    .select()
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.orgId, orgId), eq(webhookEndpoints.id, id), isNull(webhookEndpoints.deletedAt)))
  return row
}

export async function findLiveWebhookAnyOrg(executor: Executor, id: string): Promise<WebhookRecord | undefined> {
  const [row] = await executor.select().from(webhookEndpoints).where(and(eq(webhookEndpoints.id, id), isNull(webhookEndpoints.deletedAt)))
  return row
}

export async function listLiveWebhooks(executor: Executor, orgId: string): Promise<WebhookRecord[]> {
  return executor
    .select()
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.orgId, orgId), isNull(webhookEndpoints.deletedAt)))
    .orderBy(asc(webhookEndpoints.id))
}

export async function updateWebhook(executor: Executor, orgId: string, id: string, changes: Partial<NewWebhookRecord>): Promise<WebhookRecord | undefined> {
  const [row] = await executor
    .update(webhookEndpoints)
    .set(changes)
    .where(and(eq(webhookEndpoints.orgId, orgId), eq(webhookEndpoints.id, id), isNull(webhookEndpoints.deletedAt)))
    .returning()
  return row
}

/** Scheduled and pending deliveries of a deleted endpoint end as failed; none will be attempted. */
export async function cancelOpenDeliveries(executor: Executor, orgId: string, webhookId: string): Promise<number> {
  const rows = await executor
    .update(webhookDeliveries)
    .set({ status: 'failed', nextAttemptAt: null, lastError: 'endpoint_deleted' })
    .where(and(eq(webhookDeliveries.orgId, orgId), eq(webhookDeliveries.webhookId, webhookId), inArray(webhookDeliveries.status, ['pending', 'retrying'])))
    .returning({ id: webhookDeliveries.id })
  return rows.length
}

/**
 * A resend starts a fresh attempt sequence for one (event, endpoint), due at once. The last answer
 * seen stays readable until the first new attempt replaces it.
 */
export async function scheduleResend(executor: Executor, delivery: { eventId: string; webhookId: string; orgId: string; dueAt: Date }): Promise<void> {
  await executor
    .insert(webhookDeliveries)
    .values({ eventId: delivery.eventId, webhookId: delivery.webhookId, orgId: delivery.orgId, status: 'pending', attempts: 0, nextAttemptAt: delivery.dueAt })
    .onConflictDoUpdate({
      target: [webhookDeliveries.eventId, webhookDeliveries.webhookId],
      set: { status: 'pending', attempts: 0, nextAttemptAt: delivery.dueAt, lastError: null },
    })
}

export async function liveWebhookCount(executor: Executor): Promise<number> {
  const [row] = await executor.select({ value: count() }).from(webhookEndpoints).where(isNull(webhookEndpoints.deletedAt))
  return row?.value ?? 0
}


/** One statement: the secret in force becomes the previous one, so concurrent rotations chain. */
export async function rotateWebhookSecret(executor: Executor, orgId: string, id: string, secret: string, validUntil: Date, now: Date): Promise<WebhookRecord | undefined> {
  const [row] = await executor
    .update(webhookEndpoints)
    .set({ previousSecret: sql`${webhookEndpoints.secret}`, secret, previousSecretValidUntil: validUntil, updatedAt: now })
    .where(and(eq(webhookEndpoints.orgId, orgId), eq(webhookEndpoints.id, id), isNull(webhookEndpoints.deletedAt)))
    .returning()
  return row
}
