// The delivery worker is one class of about 400 lines: its passes, its claims, its attempts in
// flight and its batched outcome writes share the same counters and slots (per endpoint, in all),
// and split apart each piece would have to reach into the others' state.

import { readFileSync } from 'node:fs'
import https from 'node:https'
import { sql } from 'drizzle-orm'
import { queryPrepared, queryRows, type Database } from '../../../db/client.ts'
import type { Clock } from '../clock/clock.ts'
import { VISIBLE_EVENT } from '../events/repo.ts'
import { DELIVERY_ATTEMPTS_MAX, DELIVERY_TIMEOUT_MS, RETRY_DELAYS_SECONDS } from './model.ts'
import { sendWebhook, type AttemptResult } from './sender.ts'
import { urlPolicyOf } from './service.ts'
import { SIGNATURE_HEADER, signatureHeader } from './verify.ts'

export interface WorkerOptions {
  /** How often the worker looks for new events and due deliveries while there is work. */
  pollIntervalMs: number
  /** The same, once a pass found nothing to do (an idle instance costs the database less). */
  idlePollIntervalMs: number
  /** Attempts in flight in this process, over all endpoints. */
  concurrencyMax: number
  /** Attempts in flight in this process to any one endpoint, so a slow receiver holds few slots. */
  perEndpointMax: number
  /** Events fanned out per transaction. */
  fanOutBatchMax: number
  /**
   * While an attempt runs its row is not due until this much later (on the organization's clock); a
   * process that dies mid-attempt thus leaves a row that becomes due again by itself.
   */
  leaseSeconds: number
  /** An attempt with no complete answer within this long is a timeout, retried (the contract: 10 s). */
  attemptTimeoutMs: number
}

export const DEFAULT_WORKER_OPTIONS: WorkerOptions = {
  pollIntervalMs: 100,
  idlePollIntervalMs: 250,
  concurrencyMax: 64,
  perEndpointMax: 8,
  fanOutBatchMax: 500,
  leaseSeconds: 30,
  attemptTimeoutMs: DELIVERY_TIMEOUT_MS,
}

/** How long a kick waits for more slots to free before claiming. */
const KICK_DELAY_MS = 5
/** Due rows looked at per pass; the per-endpoint cap is applied among them. */
const DUE_SCAN_MAX = 2000
/** Fan-out transactions per pass at most, so one pass stays short under a backlog. */
const FAN_OUT_ROUNDS_MAX = 20

/** What a delivery worker works with: the database, the organizations' clocks and two settings. */
export interface DeliveryWorkerDeps {
  db: Database
  clock: Clock
  config: {
    /** A CA to trust for receivers (tests' own certificates; `WEBHOOK_CA_FILE`). */
    webhookCaFile: string | undefined
    allowLoopbackWebhooks: boolean
  }
}

interface Claimed {
  id: string
  eventId: string
  webhookId: string
  orgId: string
  attempts: number
}

interface AttemptContext {
  event: { id: string; orgId: string | null; type: string; created: Date; data: Record<string, unknown> }
  endpoint: { url: string; secret: string; previousSecret: string | null; previousSecretValidUntil: Date | null; deleted: boolean }
}

function toDate(value: string | Date): Date {
  return value instanceof Date ? value : new Date(value)
}

/**
 * The delivery worker: reads new events from the log after its durable cursor, fans each out to one
 * delivery row per matching endpoint, and sends due deliveries. Nothing on a request path waits for
 * it. Several instances may run it over one database: the cursor row serializes fan-out, and a
 * conditional update claims each due row for exactly one instance.
 *
 * A pass's fixed-text queries (the cursor, the fan-out, the due candidates) run as statements
 * prepared once per connection (`queryPrepared`), not parsed and planned at every pass: with 32
 * clients and 10 endpoints, `npm run bench:webhooks` delivered 2,571 and 2,675/s this way against
 * 372 and 341/s before, and an idle instance's passes cost Postgres about half the CPU.
 */
export class DeliveryWorker {
  private readonly inFlight = new Map<string, { webhookId: string; controller: AbortController; done: Promise<void> }>()
  private readonly perEndpoint = new Map<string, number>()
  private timer: ReturnType<typeof setTimeout> | undefined
  private ticking: Promise<void> | undefined
  private again = false
  private nextFullAt = 0
  private kickPending = false
  /** Whether the current pass found events or due deliveries. */
  private busy = false
  /** Whether the last fan-out found no new event (the next one looks read-only first). */
  private lastFanOutEmpty = false
  private stopped = false
  private readonly ca: Buffer | undefined
  private readonly outcomes: Array<{ delivery: Claimed; outcome: Outcome; resolve: () => void; reject: (error: unknown) => void }> = []
  private flushing: Promise<void> | undefined
  /** Keeps connections to receivers open between attempts; at most `perEndpointMax` per receiver. */
  private readonly agent: https.Agent
  deliveredCount = 0

  constructor(
    private readonly deps: DeliveryWorkerDeps,
    private readonly options: WorkerOptions = DEFAULT_WORKER_OPTIONS,
  ) {
    this.ca = deps.config.webhookCaFile ? readFileSync(deps.config.webhookCaFile) : undefined
    this.agent = new https.Agent({ keepAlive: true, maxSockets: options.perEndpointMax, maxFreeSockets: options.perEndpointMax, timeout: 30_000 })
  }

  start(): void {
    this.schedule(0)
  }

  async stop(): Promise<void> {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    await this.ticking
    // Attempts cut short here are not recorded; their lease runs out and they are attempted again.
    for (const entry of this.inFlight.values()) entry.controller.abort()
    await Promise.all([...this.inFlight.values()].map((entry) => entry.done))
    await this.flushing
    this.agent.destroy()
  }

  /**
   * One whole pass, as the timer runs it (fan-out of new events, then the due deliveries claimed
   * and attempted), and waits until those attempts' outcomes are written. Tests drive the worker
   * with it instead of waiting for its timer; a worker driven this way need not be started.
   */
  async runOnce(): Promise<void> {
    while (this.ticking !== undefined) await this.ticking
    this.ticking = this.pass(true)
    try {
      await this.ticking
    } finally {
      this.ticking = undefined
    }
    await this.settled()
  }

  /** Resolves once no attempt of this process is in flight and every outcome is written. */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0 || this.flushing !== undefined || this.outcomes.length > 0) {
      await Promise.all([...this.inFlight.values()].map((entry) => entry.done))
      await this.flushing
    }
  }

  /** Aborts this process's attempts in flight to an endpoint (it was deleted). */
  abortEndpoint(webhookId: string): void {
    for (const entry of this.inFlight.values()) if (entry.webhookId === webhookId) entry.controller.abort()
  }

  /**
   * Runs a pass soon, without waiting for the poll interval. Slots freed within a few milliseconds
   * are claimed together, so a busy worker makes one claim per batch rather than per answer.
   */
  kick(): void {
    if (this.stopped) return
    if (this.ticking) {
      this.again = true
      return
    }
    if (this.kickPending) return
    this.kickPending = true
    this.schedule(KICK_DELAY_MS)
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.kickPending = false
      // Fan-out runs once per poll interval; passes in between (after a kick) only dispatch.
      const full = Date.now() >= this.nextFullAt
      if (full) this.nextFullAt = Date.now() + this.options.pollIntervalMs
      this.busy = false
      this.ticking = this.pass(full).finally(() => {
        this.ticking = undefined
        const soon = this.again
        this.again = false
        if (full && !this.busy) this.nextFullAt = Date.now() + this.options.idlePollIntervalMs
        this.schedule(soon ? KICK_DELAY_MS : Math.max(0, this.nextFullAt - Date.now()))
      })
    }, delayMs)
    this.timer.unref?.()
  }

  private async pass(full: boolean): Promise<void> {
    try {
      for (let round = 0; full && round < FAN_OUT_ROUNDS_MAX && !this.stopped; round++) {
        const fanned = await this.fanOut()
        if (fanned > 0) this.busy = true
        if (fanned < this.options.fanOutBatchMax) break
      }
      if (!this.stopped) await this.dispatchDue()
    } catch (error) {
      if (!this.stopped) console.error('webhooks: delivery pass failed', error)
    }
  }

  /**
   * Moves the cursor over the next visible events and writes their delivery rows, in one
   * transaction under the cursor's row lock. Visibility is the event log's: only events of
   * transactions older than every running one, in (txid, seq) order, so none is ever passed over.
   * An endpoint receives its organization's events created from its own creation on (both on the
   * organization's clock), and the platform-wide vault events fanned out while it exists.
   */
  async fanOut(): Promise<number> {
    const fanned = await this.fanOutBatch()
    this.lastFanOutEmpty = fanned === 0
    return fanned
  }

  private async fanOutBatch(): Promise<number> {
    // After a fan-out that found nothing, look read-only first: locking the cursor row makes the
    // transaction a write that Postgres must flush at commit, which an idle instance's passes would
    // otherwise pay several times a second. While events keep coming the look would only add a
    // query (its visibility horizon reads pg_stat_activity), so a busy worker goes straight on.
    if (this.lastFanOutEmpty) {
      const [probe] = await queryPrepared<{ pending: boolean }>(
        this.deps.db,
        sql`select exists (
              select 1 from events
              where (txid, seq) > (select last_txid, last_seq from webhook_outbox_cursor where name = 'deliveries') and ${VISIBLE_EVENT}
            ) as pending`,
      )
      if (probe?.pending === false) return 0
    }
    const wallNow = new Date(this.deps.clock.wallNowMs()).toISOString()
    return this.deps.db.transaction(async (tx) => {
      const [cursor] = await queryPrepared<{ txid: string; seq: string }>(
        tx,
        sql`select last_txid::text as txid, last_seq::text as seq from webhook_outbox_cursor where name = 'deliveries' for update`,
      )
      if (!cursor) throw new Error('the webhook outbox cursor row is missing (migration 0006 creates it)')
      const [result] = await queryPrepared<{ events: number; last_txid: string | null; last_seq: string | null }>(
        tx,
        sql`with batch as (
              select id, org_id, type, created_at, txid, seq from events
              where ${VISIBLE_EVENT} and (txid, seq) > (${cursor.txid}::xid8, ${cursor.seq}::bigint)
              order by txid, seq limit ${this.options.fanOutBatchMax}
            ), fanned as (
              insert into webhook_deliveries (event_id, webhook_id, org_id, status, attempts, next_attempt_at)
              select b.id, w.id, w.org_id, 'pending', 0, ${wallNow}::timestamptz
              from batch b join webhook_endpoints w on w.deleted_at is null
                and (w.org_id = b.org_id or (b.org_id is null and b.type like 'vault.%'))
                -- Organization events and endpoints share the organization's clock; platform events
                -- are stamped by the platform, so they are not compared with a sandbox clock.
                and (b.org_id is null or w.created_at <= b.created_at)
                and ('*' = any(w.events) or b.type = any(w.events) or split_part(b.type, '.', 1) || '.*' = any(w.events))
              on conflict (event_id, webhook_id) do nothing
              returning 1
            ), tail as (select txid, seq from batch order by txid desc, seq desc limit 1)
            select (select count(*) from batch)::int as events, (select count(*) from fanned)::int as fanned,
                   (select txid::text from tail) as last_txid, (select seq::text from tail) as last_seq`,
      )
      if (!result || result.events === 0 || result.last_txid === null) return 0
      await tx.execute(
        sql`update webhook_outbox_cursor set last_txid = ${result.last_txid}::xid8, last_seq = ${result.last_seq}::bigint, updated_at = now() where name = 'deliveries'`,
      )
      return Number(result.events)
    })
  }

  private freeSlotsOf(webhookId: string): number {
    return this.options.perEndpointMax - (this.perEndpoint.get(webhookId) ?? 0)
  }

  /** Claims due rows within this process's free slots and starts their attempts. */
  async dispatchDue(): Promise<void> {
    const free = this.options.concurrencyMax - this.inFlight.size
    if (free <= 0) return
    const wallNow = new Date(this.deps.clock.wallNowMs()).toISOString()
    const orgNow = sql`(${wallNow}::timestamptz + coalesce((select c.offset_ms from org_clocks c where c.org_id = d.org_id), 0) * interval '1 millisecond')`
    const candidates = await queryPrepared<{ id: string; webhook_id: string }>(
      this.deps.db,
      sql`select id::text as id, webhook_id from (
            select id, webhook_id, next_attempt_at, row_number() over (partition by webhook_id order by next_attempt_at, id) as rank from (
              select d.id, d.webhook_id, d.next_attempt_at from webhook_deliveries d
              where d.status in ('pending', 'retrying')
                and d.next_attempt_at <= ${wallNow}::timestamptz + (select coalesce(max(offset_ms), 0) from org_clocks) * interval '1 millisecond'
                and d.next_attempt_at <= ${orgNow}
              order by d.next_attempt_at limit ${DUE_SCAN_MAX}
            ) due
          ) ranked where rank <= ${this.options.perEndpointMax} order by next_attempt_at, id`,
    )
    const chosen: string[] = []
    const planned = new Map<string, number>()
    for (const candidate of candidates) {
      if (chosen.length >= free) {
        this.again = true
        break
      }
      if (this.inFlight.has(candidate.id)) continue
      const taken = planned.get(candidate.webhook_id) ?? 0
      if (taken >= this.freeSlotsOf(candidate.webhook_id)) continue
      planned.set(candidate.webhook_id, taken + 1)
      chosen.push(candidate.id)
    }
    if (chosen.length === 0) return
    this.busy = true
    const claimed = await queryRows<{ id: string; event_id: string; webhook_id: string; org_id: string; attempts: number }>(
      this.deps.db,
      sql`update webhook_deliveries d
            set attempts = d.attempts + 1, last_attempt_at = ${orgNow},
                next_attempt_at = ${orgNow} + ${this.options.leaseSeconds} * interval '1 second'
          where d.id in (${sql.join(chosen.map((id) => sql`${id}::bigint`), sql`, `)})
            and d.status in ('pending', 'retrying') and d.next_attempt_at <= ${orgNow}
          returning d.id::text as id, d.event_id, d.webhook_id, d.org_id, d.attempts`,
    )
    if (claimed.length === 0) return
    const contexts = await this.loadContexts(claimed.map((row) => row.id))
    for (const row of claimed) {
      this.startAttempt({ id: row.id, eventId: row.event_id, webhookId: row.webhook_id, orgId: row.org_id, attempts: Number(row.attempts) }, contexts.get(row.id))
    }
  }

  private startAttempt(delivery: Claimed, context: AttemptContext | undefined): void {
    const controller = new AbortController()
    this.perEndpoint.set(delivery.webhookId, (this.perEndpoint.get(delivery.webhookId) ?? 0) + 1)
    const release = () => {
      if (!this.inFlight.delete(delivery.id)) return
      const left = (this.perEndpoint.get(delivery.webhookId) ?? 1) - 1
      if (left <= 0) this.perEndpoint.delete(delivery.webhookId)
      else this.perEndpoint.set(delivery.webhookId, left)
      this.kick()
    }
    const done = (async () => {
      const outcome = await this.attempt(delivery, context, controller.signal)
      // The slot frees as soon as the receiver has answered; the row stays leased until written.
      release()
      if (outcome !== undefined) await this.record(delivery, outcome)
    })()
      .catch((error) => {
        if (!this.stopped) console.error(`webhooks: attempt of delivery ${delivery.id} failed`, error)
      })
      .finally(release)
    this.inFlight.set(delivery.id, { webhookId: delivery.webhookId, controller, done })
  }

  /** The event and endpoint of each claimed delivery, in one query. */
  private async loadContexts(deliveryIds: string[]): Promise<Map<string, AttemptContext>> {
    const rows = await queryRows<Record<string, any>>(
      this.deps.db,
      sql`select d.id::text as delivery_id, e.id, e.org_id, e.type, e.created_at, e.data, w.url, w.secret, w.previous_secret, w.previous_secret_valid_until, w.deleted_at
          from webhook_deliveries d join events e on e.id = d.event_id join webhook_endpoints w on w.id = d.webhook_id
          where d.id in (${sql.join(deliveryIds.map((id) => sql`${id}::bigint`), sql`, `)})`,
    )
    const contexts = new Map<string, AttemptContext>()
    for (const row of rows) {
      contexts.set(row.delivery_id, {
        event: { id: row.id, orgId: row.org_id, type: row.type, created: toDate(row.created_at), data: typeof row.data === 'string' ? JSON.parse(row.data) : row.data },
        endpoint: {
          url: row.url,
          secret: row.secret,
          previousSecret: row.previous_secret,
          previousSecretValidUntil: row.previous_secret_valid_until ? toDate(row.previous_secret_valid_until) : null,
          deleted: row.deleted_at !== null,
        },
      })
    }
    return contexts
  }

  /** One attempt; answers the outcome to record, or undefined when it was aborted. */
  private async attempt(delivery: Claimed, context: AttemptContext | undefined, signal: AbortSignal): Promise<Outcome | undefined> {
    if (!context || context.endpoint.deleted) return { status: 'failed', statusCode: null, error: 'endpoint_deleted', nextAttemptAt: null }
    const { event, endpoint } = context
    const body = JSON.stringify({ id: event.id, orgId: event.orgId, type: event.type, created: event.created.toISOString(), data: event.data })
    const secrets = [endpoint.secret]
    if (endpoint.previousSecret && endpoint.previousSecretValidUntil && endpoint.previousSecretValidUntil.getTime() > this.deps.clock.nowMs(delivery.orgId)) {
      secrets.push(endpoint.previousSecret)
    }
    // The timestamp is the real time: the receiver compares it with its own clock.
    const timestamp = Math.floor(this.deps.clock.wallNowMs() / 1000)
    const result = await sendWebhook(endpoint.url, body, {
      policy: urlPolicyOf(this.deps.config),
      timeoutMs: this.options.attemptTimeoutMs,
      ca: this.ca,
      agent: this.agent,
      signal,
      headers: {
        'content-type': 'application/json',
        'user-agent': 'Kassa-Webhooks/1.0',
        [SIGNATURE_HEADER.toLowerCase()]: signatureHeader(body, timestamp, secrets),
        'x-service-event-id': event.id,
      },
    })
    if (result.kind === 'aborted') return undefined
    return this.outcomeOf(delivery, result)
  }

  private outcomeOf(delivery: Claimed, result: Exclude<AttemptResult, { kind: 'aborted' }>): Outcome {
    const statusCode = result.kind === 'answered' ? result.statusCode : null
    if (statusCode !== null && statusCode >= 200 && statusCode < 300) return { status: 'delivered', statusCode, error: null, nextAttemptAt: null }
    const error = result.kind === 'answered' ? `http_${statusCode}` : result.kind === 'timeout' ? 'timeout' : `${result.kind}: ${result.message}`
    if (statusCode !== null && statusCode >= 400 && statusCode < 500) return { status: 'failed', statusCode, error, nextAttemptAt: null }
    if (delivery.attempts >= DELIVERY_ATTEMPTS_MAX) return { status: 'failed', statusCode, error, nextAttemptAt: null }
    const delaySeconds = RETRY_DELAYS_SECONDS[delivery.attempts - 1]!
    return { status: 'retrying', statusCode, error, nextAttemptAt: new Date(this.deps.clock.nowMs(delivery.orgId) + delaySeconds * 1000) }
  }

  /**
   * Outcomes are written in batches: whatever finished while the previous write ran goes in the
   * next single statement. Guarded by the attempt number and status: an attempt superseded by a
   * resend or a deletion records nothing. Until written, the row's lease keeps it from being due.
   */
  private record(delivery: Claimed, outcome: Outcome): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.outcomes.push({ delivery, outcome, resolve, reject })
      if (!this.flushing) this.flushing = this.flushOutcomes().finally(() => (this.flushing = undefined))
    })
  }

  private async flushOutcomes(): Promise<void> {
    while (this.outcomes.length > 0) {
      const batch = this.outcomes.splice(0, 500)
      const values = sql.join(
        batch.map(
          ({ delivery, outcome }) =>
            sql`(${delivery.id}::bigint, ${delivery.attempts}::int, ${outcome.status}, ${outcome.statusCode}::int, ${outcome.error}, ${outcome.nextAttemptAt ? outcome.nextAttemptAt.toISOString() : null}::timestamptz)`,
        ),
        sql`, `,
      )
      try {
        await this.deps.db.execute(
          sql`update webhook_deliveries d set status = v.status, last_status_code = v.status_code, last_error = v.error, next_attempt_at = v.next_attempt_at
              from (values ${values}) as v(id, attempts, status, status_code, error, next_attempt_at)
              where d.id = v.id and d.attempts = v.attempts and d.status in ('pending', 'retrying')`,
        )
        for (const entry of batch) {
          if (entry.outcome.status === 'delivered') this.deliveredCount += 1
          entry.resolve()
        }
      } catch (error) {
        for (const entry of batch) entry.reject(error)
      }
    }
  }
}

interface Outcome {
  status: 'delivered' | 'retrying' | 'failed'
  statusCode: number | null
  error: string | null
  nextAttemptAt: Date | null
}
