import { AsyncLocalStorage } from 'node:async_hooks'
import { lt } from 'drizzle-orm'
import type { Database, Executor } from '../../db/client.ts'
import { idempotencyRecords } from '../../db/schema/index.ts'
import { ApiError } from '../lib/errors.ts'
import { requestSlot } from './request-slot.ts'
import {
  idempotencyKeyOf,
  inlineRecord,
  judgeExisting,
  REPLAYED_HEADER,
  requestHashOf,
  type IdempotencyRow,
  type IdempotencyStore,
  type InlineIdempotency,
} from './idempotency.ts'

// Idempotency-Keys whose answer commits with the request's effect: a money-moving request's record
// goes into its ledger commit (`answerInCommit`), and operator actions run once per key
// (`runOnceForOperator`). The store of claimed keys is idempotency.ts.

/** What a money-moving request's commit carries: its key's record, completed with the answer made before it. */
interface AnswerSlot {
  claim: InlineIdempotency
  status: number
  nowMs: number
  body?: string
}

const answerSlots = new AsyncLocalStorage<AnswerSlot>()
const inlineFailures = requestSlot<{ claim: InlineIdempotency; store: IdempotencyStore }>('kassa.inlineIdempotency')

/**
 * Called by a money-moving service just before it submits its ledger operation, with the answer
 * it will give: answers the request's idempotency record, completed with that answer, for the
 * operation to commit with its effect (`LedgerOperation.idempotencyRecord`), or undefined when
 * the request has no Idempotency-Key (or another operation of the request already carries it).
 * The route then sends exactly this text.
 */
export function answerInCommit(view: unknown): IdempotencyRow | undefined {
  const slot = answerSlots.getStore()
  if (slot === undefined || slot.body !== undefined) return undefined
  slot.body = JSON.stringify(view)
  return inlineRecord(slot.claim, slot.status, slot.body, slot.nowMs)
}

/**
 * Takes back the answer given to `answerInCommit` when the operation carrying it did not commit
 * and the service tries again with another answer (an intent whose cycle closed meanwhile goes
 * to the next cycle): the next `answerInCommit` of the request makes the record anew.
 */
export function forgetAnswerInCommit(): void {
  const slot = answerSlots.getStore()
  if (slot !== undefined) slot.body = undefined
}

/**
 * For a write that does not go through the ledger (a quote, a declared deposit): `write` and the
 * request's idempotency record, with the answer made from what was written, commit in one
 * transaction. A key another request's commit took first rolls the write back
 * (`IdempotencyKeyTaken`, answered from that commit). Without a key, `write` runs on its own.
 */
export async function writeWithAnswer<T>(db: Database, write: (executor: Executor) => Promise<T>, answer: (written: T) => unknown): Promise<T> {
  const slot = answerSlots.getStore()
  if (slot === undefined || slot.body !== undefined) return write(db)
  return db.transaction(async (tx) => {
    const written = await write(tx)
    const row = answerInCommit(answer(written))!
    const saved = await tx
      .insert(idempotencyRecords)
      .values(row)
      .onConflictDoUpdate({ target: [idempotencyRecords.orgId, idempotencyRecords.key], set: { ...row }, setWhere: lt(idempotencyRecords.expiresAt, row.createdAt!) })
      .returning({ key: idempotencyRecords.key })
    if (saved.length === 0) {
      slot.body = undefined
      throw new IdempotencyKeyTaken(row.orgId, row.key)
    }
    return written
  })
}

/**
 * Runs a money-moving request with its Idempotency-Key written in the same commit as its effect:
 * a key with a live record is answered from it (replay, conflict); otherwise the handler runs, and
 * its service puts the record with the answer into its ledger operation (`answerInCommit`). A key
 * that another request's commit took first is answered from that commit's record. An answer no
 * commit carried (the request moved nothing) is saved afterwards; refusals are saved by the errors
 * plugin (`recordIdempotentFailure`), bad input and internal failures not at all.
 */
export async function runWithAnswerInCommit(
  store: IdempotencyStore,
  context: { request: Request; orgId: string; path: string; body: unknown; set: { headers: Record<string, unknown>; status?: number | string } },
  status: number,
  handle: () => Promise<unknown>,
  /** Called once the handler's commit is durable, before the answer is sent (told whether the request had a key). */
  afterCommit: (keyed: boolean) => void = () => {},
): Promise<Response> {
  const { request, orgId, path, body, set } = context
  const key = idempotencyKeyOf(request)
  if (key === undefined) {
    const result = await handle()
    afterCommit(false)
    return jsonAnswer(status, JSON.stringify(result), set)
  }
  const method = request.method
  const requestHash = requestHashOf(method, path, body)
  const existing = await store.find(orgId, key)
  if (existing !== undefined) {
    // A claim left by a write of the old two-step kind is settled the same way as any claim.
    const outcome = existing.state === 'in_progress' && existing.requestHash === requestHash ? await store.settleStaleClaim(existing) : judgeExisting(existing, { method, path, body, requestHash })
    if (outcome.kind === 'replay') return replayAnswer(outcome.status, outcome.body, set)
  }
  if (!store.holdLocally(orgId, key)) throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
  const claim: InlineIdempotency = { orgId, key, method, path, requestHash, requestBody: body ?? null }
  const slot: AnswerSlot = { claim, status, nowMs: store.nowMs() }
  try {
    let result: unknown
    try {
      result = await answerSlots.run(slot, handle)
    } catch (error) {
      if (error instanceof IdempotencyKeyTaken) {
        const taken = await store.find(orgId, key)
        if (taken !== undefined) {
          const outcome = judgeExisting(taken, { method, path, body, requestHash })
          if (outcome.kind === 'replay') return replayAnswer(outcome.status, outcome.body, set)
        }
        throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
      }
      inlineFailures.set(request, { claim, store })
      throw error
    }
    afterCommit(true)
    if (slot.body === undefined) {
      slot.body = JSON.stringify(result)
      await store.saveAnswer(claim, status, slot.body)
    }
    return jsonAnswer(status, slot.body, set)
  } finally {
    store.releaseLocally(orgId, key)
  }
}

/** The operation's Idempotency-Key is held by an earlier request: nothing of it was applied. */
export class IdempotencyKeyTaken extends Error {
  constructor(
    readonly orgId: string,
    readonly key: string,
  ) {
    super(`Idempotency-Key ${key} is already held`)
  }
}

/** Saves a refusal of a request run by `runWithAnswerInCommit` (not bad input, not an internal failure). */
export async function recordInlineFailure(request: Request, error: ApiError, response: Response): Promise<boolean> {
  const held = inlineFailures.get(request)
  if (held === undefined) return false
  inlineFailures.delete(request)
  if (error.code === 'invalid_request' || response.status >= 500) return true
  await held.store.saveAnswer(held.claim, response.status, await response.clone().text())
  return true
}

/** The content type of every JSON answer the app gives with this status (a replay gives the same). */
export function jsonContentType(status: number): string {
  return status >= 400 ? 'application/json' : 'application/json;charset=utf-8'
}

function jsonAnswer(status: number, body: string, set: { headers: Record<string, unknown> }): Response {
  const headers: Record<string, string> = {}
  for (const name in set.headers) headers[name] = String(set.headers[name])
  headers['content-type'] = jsonContentType(status)
  set.headers = {}
  return new Response(body, { status, headers })
}

function replayAnswer(status: number, body: string, set: { headers: Record<string, unknown> }): Response {
  set.headers[REPLAYED_HEADER] = 'true'
  return jsonAnswer(status, body, set)
}

/** The scope of operators' Idempotency-Keys (no organization id has this shape). */
export const OPERATOR_SCOPE = '@operator'

/**
 * An operator call that creates something (an organization, a key), run once per Idempotency-Key
 * in the operators' scope: a retry gets the first answer; a refusal is saved by the errors plugin.
 */
export async function runOnceForOperator(
  store: IdempotencyStore,
  context: { request: Request; path: string; body?: unknown; set: { headers: Record<string, unknown> } },
  status: number,
  handle: () => Promise<unknown>,
): Promise<Response> {
  const outcome = await store.beginScoped(context.request, OPERATOR_SCOPE, context.path, context.body)
  if (outcome.kind === 'replay') return replayAnswer(outcome.status, outcome.body, context.set)
  const text = JSON.stringify(await handle())
  await store.complete(context.request, status, text)
  return jsonAnswer(status, text, context.set)
}
