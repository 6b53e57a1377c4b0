import { notify } from '../../../db/client.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { randomToken } from '../../lib/hash.ts'
import { newId } from '../../lib/ids.ts'
import type { Runtime } from '../../runtime.ts'
import { SECRET_ROTATION_OVERLAP_SECONDS, WEBHOOK_ENDPOINTS_MAX, type CreateWebhookInput, type UpdateWebhookInput, type WebhookView } from './model.ts'
import * as repo from './repo.ts'
import { checkWebhookUrl, UrlRefused, type UrlPolicy } from '../../lib/url-policy.ts'

/** Instances tell each other that an endpoint was deleted, so each aborts its attempts in flight. */
export const WEBHOOK_CHANNEL = 'kassa_webhooks'

/** Aborts in-flight attempts in this process; set by the delivery worker when it runs here. */
const abortersByRuntime = new WeakMap<object, (webhookId: string) => void>()

export function registerAborter(runtime: object, abort: (webhookId: string) => void): void {
  abortersByRuntime.set(runtime, abort)
}

export function urlPolicyOf(runtime: Pick<Runtime, 'config'>): UrlPolicy {
  return { allowLoopback: runtime.config.allowLoopbackWebhooks }
}

/** `whsec_` and 32 random bytes in base58. */
export function newSigningSecret(): string {
  return `whsec_${randomToken(32)}`
}

export function toWebhookView(row: repo.WebhookRecord): WebhookView {
  return { id: row.id, url: row.url, events: row.events, createdAt: row.createdAt.toISOString() }
}

async function checkUrl(runtime: Runtime, url: string): Promise<string> {
  try {
    return (await checkWebhookUrl(url, urlPolicyOf(runtime))).url.toString()
  } catch (error) {
    if (error instanceof UrlRefused) throw invalid('url', error.message)
    throw error
  }
}

export async function createWebhook(runtime: Runtime, orgId: string, input: CreateWebhookInput): Promise<WebhookView & { secret: string }> {
  const url = await checkUrl(runtime, input.url)
  const now = runtime.clock.now(orgId)
  const row = await runtime.db.transaction(async (tx) => {
    // The organization's row lock makes the limit exact under concurrent creates.
    if (!(await repo.lockOrganization(tx, orgId))) throw notFound('organization')
    if ((await repo.countLiveWebhooks(tx, orgId)) >= WEBHOOK_ENDPOINTS_MAX) {
      throw new ApiError('limit_exceeded', `An organization has at most ${WEBHOOK_ENDPOINTS_MAX} webhook endpoints; delete one first`)
    }
    return repo.insertWebhook(tx, { id: newId('wh'), orgId, url, events: input.events, secret: newSigningSecret(), createdAt: now, updatedAt: now })
  })
  return { ...toWebhookView(row), secret: row.secret }
}

export async function listWebhooks(runtime: Runtime, orgId: string): Promise<{ webhooks: WebhookView[] }> {
  return { webhooks: (await repo.listLiveWebhooks(runtime.db, orgId)).map(toWebhookView) }
}

export async function getWebhook(runtime: Runtime, orgId: string, id: string): Promise<WebhookView> {
  const row = await repo.findLiveWebhook(runtime.db, orgId, id)
  if (!row) throw notFound('webhook endpoint')
  return toWebhookView(row)
}

export async function updateWebhook(runtime: Runtime, orgId: string, id: string, input: UpdateWebhookInput): Promise<WebhookView> {
  if (input.url === undefined && input.events === undefined) throw invalid('url', 'Send url and/or events, only the fields that change')
  const changes: Partial<repo.NewWebhookRecord> = { updatedAt: runtime.clock.now(orgId) }
  if (input.url !== undefined) changes.url = await checkUrl(runtime, input.url)
  if (input.events !== undefined) changes.events = input.events
  const row = await repo.updateWebhook(runtime.db, orgId, id, changes)
  if (!row) throw notFound('webhook endpoint')
  return toWebhookView(row)
}

/** Deliveries stop at once: scheduled ones are cancelled and attempts in flight are aborted. */
export async function deleteWebhook(runtime: Runtime, orgId: string, id: string): Promise<{ id: string; deleted: true }> {
  const deleted = await runtime.db.transaction(async (tx) => {
    const row = await repo.updateWebhook(tx, orgId, id, { deletedAt: runtime.clock.now(orgId) })
    if (!row) return false
    await repo.cancelOpenDeliveries(tx, orgId, id)
    return true
  })
  if (!deleted) throw notFound('webhook endpoint')
  abortersByRuntime.get(runtime)?.(id)
  await notify(runtime.db, WEBHOOK_CHANNEL, id)
  return { id, deleted: true }
}

export async function rotateSecret(runtime: Runtime, orgId: string, id: string): Promise<{ secret: string; previousSecretValidUntil: string }> {
  const now = runtime.clock.now(orgId)
  const validUntil = new Date(now.getTime() + SECRET_ROTATION_OVERLAP_SECONDS * 1000)
  const secret = newSigningSecret()
  const row = await repo.rotateWebhookSecret(runtime.db, orgId, id, secret, validUntil, now)
  if (!row) throw notFound('webhook endpoint')
  return { secret, previousSecretValidUntil: validUntil.toISOString() }
}
