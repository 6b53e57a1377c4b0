import { AsyncLocalStorage } from 'node:async_hooks'
import { and, eq, lt, sql } from 'drizzle-orm'
import { insertFromJson, jsonParameter, OP_COLUMN, upsertTail } from '../../db/bulk.ts'
import { queryRows, type Database, type Executor } from '../../db/client.ts'
import { idempotencyRecords } from '../../db/schema/index.ts'
import { ApiError } from '../lib/errors.ts'
import { requestSlot } from './request-slot.ts'
import { sha256Hex } from '../lib/hash.ts'
import type { Principal } from './auth.ts'
import { LONE_PROCESS, type Owners } from './idempotency-owners.ts'

export const IDEMPOTENCY_HEADER = 'idempotency-key'
export const REPLAYED_HEADER = 'idempotent-replayed'
/** Records are kept at least this long; a purge removes them afterwards. */
export const IDEMPOTENCY_RETENTION_MS = 24 * 3600 * 1000
/** An in-progress claim older than this belonged to a process that died; a retry may take it over. */
export const IDEMPOTENCY_LOCK_MS = 60 * 1000
const KEY_SHAPE = /^[\x21-\x7e]{1,255}$/

interface Claim {
  orgId: string
  key: string
}

const claims = requestSlot<Claim>('kassa.idempotencyClaim')

/** Object keys sorted at every depth, so the same body always hashes the same. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null)
  if (Array.isArray(value)) {
    let text = '['
    for (let index = 0; index < value.length; index++) text += (index === 0 ? '' : ',') + canonicalJson(value[index])
    return `${text}]`
  }
  // Keys in code-unit order (the default sort); members whose value is undefined are left out.
  const record = value as Record<string, unknown>
  let text = '{'
  for (const key of Object.keys(record).sort()) {
    const member = record[key]
    if (member === undefined) continue
    text += `${text.length === 1 ? '' : ','}${JSON.stringify(key)}:${canonicalJson(member)}`
  }
  return `${text}}`
}

function describeDifference(
  stored: { method: string; path: string; requestBody: unknown },
  method: string,
  path: string,
  body: unknown,
): { field: string; message: string } {
  if (stored.method !== method || stored.path !== path) {
    return {
      field: 'Idempotency-Key',
      message: `This Idempotency-Key was first used for ${stored.method} ${stored.path}, not ${method} ${path}`,
    }
  }
  const before = (stored.requestBody ?? {}) as Record<string, unknown>
  const after = (body ?? {}) as Record<string, unknown>
  const fields = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort()
  const differing = fields.filter((field) => canonicalJson(before[field]) !== canonicalJson(after[field]))
  const list = differing.length > 0 ? differing.join(', ') : 'body'
  return {
    field: differing[0] ?? 'body',
    message: `This Idempotency-Key was used with a different request body; differing fields: ${list}`,
  }
}

export type IdempotencyOutcome = { kind: 'proceed' } | { kind: 'replay'; status: number; body: string }
export type IdempotencyRow = typeof idempotencyRecords.$inferInsert
type StoredRecord = typeof idempotencyRecords.$inferSelect

/** The request's Idempotency-Key, checked for shape; undefined when it sends none. */
export function idempotencyKeyOf(request: Request): string | undefined {
  const key = request.headers.get(IDEMPOTENCY_HEADER)
  if (key === null) return undefined
  if (!KEY_SHAPE.test(key)) {
    throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 printable ASCII characters', {
      field: 'Idempotency-Key',
    })
  }
  return key
}

export function requestHashOf(method: string, path: string, body: unknown): string {
  return sha256Hex(`${method} ${path}\n${canonicalJson(body)}`)
}

/**
 * What a request meets when its key is held by a live record: the saved answer if it is the same
 * request and finished, otherwise `idempotency_conflict` (another request) or
 * `idempotency_in_progress` (the first is still running).
 */
export function judgeExisting(existing: Pick<StoredRecord, 'method' | 'path' | 'requestBody' | 'requestHash' | 'state' | 'responseStatus' | 'responseBody'>, request: { method: string; path: string; body: unknown; requestHash: string }): IdempotencyOutcome {
  if (existing.requestHash !== request.requestHash) {
    const difference = describeDifference(existing, request.method, request.path, request.body)
    throw new ApiError('idempotency_conflict', difference.message, { field: difference.field })
  }
  if (existing.state === 'completed') return { kind: 'replay', status: existing.responseStatus!, body: existing.responseBody! }
  throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
}

/**
 * A request whose record is written by the ledger in the same commit as its effect (the
 * authorization hot path) instead of being claimed first: it carries this, and the record is
 * inserted completed, with the answer, only if the key is free.
 */
export interface InlineIdempotency {
  orgId: string
  key: string
  method: string
  path: string
  requestHash: string
  requestBody: unknown
}

/**
 * Claiming a key inserts its record completed; a key held by an expired record is taken over, a key
 * held by a live one is left alone (the ledger writer's and the decline recorder's statements read
 * which keys were written from `returning org_id, key`). One statement cannot touch a row twice, so
 * the rows of one claim must have distinct keys.
 */
export const RECORD_CLAIM_TAIL = `${upsertTail('org_id, key', ['method', 'path', 'request_hash', 'request_body', 'state', 'response_status', 'response_body', 'created_at', 'locked_until', 'expires_at'])} where idempotency_records.expires_at <= excluded.created_at`

/** SQL over `kassa_op`, for a statement with `claimParts`: the row's operation kept its claim (or had none). */
export const NOT_LOST = `${OP_COLUMN} not in (select op from lost)`

/**
 * The parts of a multi-part statement that claim Idempotency-Keys in the same commit as the rows
 * they guard (the ledger writer's batches, the decline recorder's): `claimed` inserts the records,
 * `lost` names the operations whose key a live record holds, and every other part keeps only rows
 * passing `NOT_LOST`. The claims must have distinct keys. Answers the parts' texts and the value of
 * their `claims` parameter.
 */
export function claimParts(claims: ReadonlyArray<{ record: IdempotencyRow; op: number }>): { parts: string[]; claims: Record<string, unknown>[]; text: string } {
  const part = insertFromJson(
    idempotencyRecords,
    claims.map((claim) => claim.record),
    jsonParameter('claims'),
    { tail: `${RECORD_CLAIM_TAIL} returning org_id, key` },
  )
  return {
    // The claim's key again, under names the `lost` part reads (the insert reads positional fields).
    claims: part.rows.map((row, index) => ({ ...row, org_id: claims[index]!.record.orgId, key: claims[index]!.record.key, [OP_COLUMN]: claims[index]!.op })),
    /** The claims' insert, a text built once per row shape: with the parts' order fixed, it decides their text. */
    text: part.text,
    parts: [
      `claimed as (${part.text})`,
      `lost as (select c.${OP_COLUMN} as op from jsonb_to_recordset(${jsonParameter('claims')}) as c(org_id text, key text, ${OP_COLUMN} integer)
        where not exists (select 1 from claimed w where w.org_id = c.org_id and w.key = c.key))`,
    ],
  }
}

export const recordId = (orgId: string, key: string) => `${orgId}\n${key}`

export function inlineRecord(claim: InlineIdempotency, responseStatus: number, responseBody: string, nowMs: number): IdempotencyRow {
  return {
    orgId: claim.orgId,
    key: claim.key,
    method: claim.method,
    path: claim.path,
    requestHash: claim.requestHash,
    requestBody: claim.requestBody ?? null,
    state: 'completed',
    responseStatus,
    responseBody,
    createdAt: new Date(nowMs),
    lockedUntil: new Date(nowMs),
    expiresAt: new Date(nowMs + IDEMPOTENCY_RETENTION_MS),
  }
}

/**
 * Stripe's model: a key is scoped to the organization and kept 24 h; the first request's answer
 * (status and body, success or failure) is saved and replayed to retries with the same body. A
 * request that fails validation is not saved, so it can be corrected and retried with the same key.
 */
export class IdempotencyStore {
  private readonly heldLocally = new Set<string>()

  constructor(
    private readonly db: Database,
    private readonly wallNowMs: () => number,
    /** Who claims keys here, and whether another claimant's process still runs (see `Owners`). */
    private readonly owners: Owners = LONE_PROCESS,
  ) {}

  async begin(request: Request, principal: Principal, path: string, body: unknown): Promise<IdempotencyOutcome> {
    return this.beginScoped(request, principal.orgId, path, body)
  }

  /** `begin` for keys of a scope of their own: an organization's id, or `OPERATOR_SCOPE`. */
  async beginScoped(request: Request, scope: string, path: string, body: unknown): Promise<IdempotencyOutcome> {
    const principal = { orgId: scope }
    const key = idempotencyKeyOf(request)
    if (key === undefined) return { kind: 'proceed' }
    const method = request.method
    const requestHash = requestHashOf(method, path, body)
    await this.owners.ready()
    const nowMs = this.wallNowMs()
    const fresh = {
      orgId: principal.orgId,
      key,
      method,
      path,
      requestHash,
      requestBody: body ?? null,
      state: 'in_progress' as const,
      owner: this.owners.id,
      lockedUntil: new Date(nowMs + IDEMPOTENCY_LOCK_MS),
      expiresAt: new Date(nowMs + IDEMPOTENCY_RETENTION_MS),
    }
    for (let attempt = 0; attempt < 3; attempt++) {
      const inserted = await this.db.insert(idempotencyRecords).values(fresh).onConflictDoNothing().returning({ key: idempotencyRecords.key })
      if (inserted.length === 1) {
        claims.set(request, { orgId: principal.orgId, key })
        return { kind: 'proceed' }
      }
      const [existing] = await this.db
        .select()
        .from(idempotencyRecords)
        .where(and(eq(idempotencyRecords.orgId, principal.orgId), eq(idempotencyRecords.key, key)))
      if (!existing) continue
      if (existing.expiresAt.getTime() <= nowMs) {
        await this.db
          .delete(idempotencyRecords)
          .where(and(eq(idempotencyRecords.orgId, principal.orgId), eq(idempotencyRecords.key, key), lt(idempotencyRecords.expiresAt, new Date(nowMs))))
        continue
      }
      if (existing.requestHash !== requestHash || existing.state === 'completed') return judgeExisting(existing, { method, path, body, requestHash })
      // A claim held by a process that is gone is taken over at once; one whose owner runs (or
      // whose owner cannot be told) waits for its lock to lapse.
      const ownerGone = existing.owner !== null && existing.owner !== this.owners.id && !(await this.owners.alive(existing.owner))
      if (!ownerGone && existing.lockedUntil.getTime() > nowMs) return judgeExisting(existing, { method, path, body, requestHash })
      const [taken] = await this.db
        .update(idempotencyRecords)
        .set({ lockedUntil: fresh.lockedUntil, owner: this.owners.id })
        .where(
          and(
            eq(idempotencyRecords.orgId, principal.orgId),
            eq(idempotencyRecords.key, key),
            eq(idempotencyRecords.state, 'in_progress'),
            ownerGone ? eq(idempotencyRecords.owner, existing.owner!) : lt(idempotencyRecords.lockedUntil, new Date(nowMs)),
          ),
        )
        .returning({ key: idempotencyRecords.key })
      if (taken) {
        claims.set(request, { orgId: principal.orgId, key })
        return { kind: 'proceed' }
      }
    }
    throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
  }

  /** Whether this request holds a claim (`complete` or `release` has something to do). */
  claimed(request: Request): boolean {
    return claims.has(request)
  }

  /** Saves the answer of a claimed request; a no-op for requests without a key. */
  async complete(request: Request, status: number, body: string): Promise<void> {
    const claim = claims.get(request)
    if (claim === undefined) return
    claims.delete(request)
    await this.db
      .update(idempotencyRecords)
      .set({ state: 'completed', responseStatus: status, responseBody: body })
      .where(and(eq(idempotencyRecords.orgId, claim.orgId), eq(idempotencyRecords.key, claim.key)))
  }

  /** Forgets a claim whose request was refused as invalid, so the key can be used again. */
  async release(request: Request): Promise<void> {
    const claim = claims.get(request)
    if (claim === undefined) return
    claims.delete(request)
    await this.db
      .delete(idempotencyRecords)
      .where(and(eq(idempotencyRecords.orgId, claim.orgId), eq(idempotencyRecords.key, claim.key), eq(idempotencyRecords.state, 'in_progress')))
  }

  /**
   * Saves an answer that no commit carried (a refusal, or a write that moved nothing), unless the
   * key already has a live record.
   */
  async saveAnswer(claim: InlineIdempotency, status: number, body: string): Promise<void> {
    const row = inlineRecord(claim, status, body, this.wallNowMs())
    await this.db
      .insert(idempotencyRecords)
      .values(row)
      .onConflictDoUpdate({
        target: [idempotencyRecords.orgId, idempotencyRecords.key],
        set: { ...row },
        setWhere: lt(idempotencyRecords.expiresAt, new Date(this.wallNowMs())),
      })
  }

  nowMs(): number {
    return this.wallNowMs()
  }

  /**
   * A claim met by a request of the one-commit kind: its owner gone (or its lock lapsed), the
   * claim is dropped and the request runs; otherwise it is still in progress.
   */
  async settleStaleClaim(existing: StoredRecord): Promise<IdempotencyOutcome> {
    const ownerGone = existing.owner !== null && existing.owner !== this.owners.id && !(await this.owners.alive(existing.owner))
    if (!ownerGone && existing.lockedUntil.getTime() > this.wallNowMs()) {
      throw new ApiError('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed; retry shortly')
    }
    await this.db
      .delete(idempotencyRecords)
      .where(and(eq(idempotencyRecords.orgId, existing.orgId), eq(idempotencyRecords.key, existing.key), eq(idempotencyRecords.state, 'in_progress')))
    return { kind: 'proceed' }
  }

  /** The live record of a key, if any (an expired one counts as none). */
  async find(orgId: string, key: string): Promise<StoredRecord | undefined> {
    const [existing] = await this.db
      .select()
      .from(idempotencyRecords)
      .where(and(eq(idempotencyRecords.orgId, orgId), eq(idempotencyRecords.key, key)))
    if (existing === undefined || existing.expiresAt.getTime() <= this.wallNowMs()) return undefined
    return existing
  }

  /**
   * Inline requests with the same key in this instance, one at a time: the second gets
   * `idempotency_in_progress` at once instead of being decided twice. (Across instances the
   * record's primary key decides.) Answers false when the key is already held.
   */
  holdLocally(orgId: string, key: string): boolean {
    const id = `${orgId}\n${key}`
    if (this.heldLocally.has(id)) return false
    this.heldLocally.add(id)
    return true
  }

  releaseLocally(orgId: string, key: string): void {
    this.heldLocally.delete(`${orgId}\n${key}`)
  }

  async purgeExpired(): Promise<void> {
    await this.db.delete(idempotencyRecords).where(sql`${idempotencyRecords.expiresAt} < ${new Date(this.wallNowMs())}`)
  }
}
