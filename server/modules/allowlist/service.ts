import { ApiError, notFound } from '../../lib/errors.ts'
import { newId } from '../../lib/ids.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { Clock } from '../clock/clock.ts'
import type { Screening } from '../screening/screening.ts'
import { parseAddress } from '../chain/addresses.ts'
import { appendEvent } from '../events/writer.ts'
import { earliestWallMs } from '../../platform/due-sweep.ts'
import { ALLOWLIST_TIMELOCK_MS, type AllowlistEntryView, type CreateAllowlistEntryInput } from './model.ts'
import * as repo from './repo.ts'

/** One sweep activates at most this many entries per organization; the next sweep takes the rest. */
const ACTIVATION_BATCH_MAX = 500

/** What the allowlist services work with; `wakeSweep` is the activation sweep's, made by `createAllowlistModule`. */
export interface AllowlistContext {
  db: Database
  ledger: Ledger
  clock: Clock
  /** Screens each destination at registration. */
  screening: Pick<Screening, 'screen'>
  /** Tells the activation sweep of a timelock ending at a wall-clock time (a no-op before it starts). */
  wakeSweep(wallMs: number): void
}

export function toAllowlistEntryView(row: repo.AllowlistEntryRecord): AllowlistEntryView {
  return {
    id: row.id,
    accountId: row.accountId,
    network: row.network,
    address: row.address,
    label: row.label,
    state: row.state,
    activatesAt: row.activatesAt.toISOString(),
    activatedAt: row.activatedAt?.toISOString() ?? null,
    removedAt: row.removedAt?.toISOString() ?? null,
    createdAt: row.createdAt.toISOString(),
  }
}

/** The event data of every `treasury.allowlist.*` event: the contract's `id`, `accountId`, `address`, and the network. */
function eventData(row: repo.AllowlistEntryRecord): Record<string, unknown> {
  return { id: row.id, accountId: row.accountId, address: row.address, network: row.network }
}

/**
 * Registers a destination: validated strictly for its network, screened, then registered (in its timelock) for 24 h on
 * the organization's clock. A screening hit is `screening_rejected` and stores nothing. Registering
 * a destination the account already has (not removed) answers that entry and does not restart its timelock.
 */
export async function registerEntry(
  context: AllowlistContext,
  orgId: string,
  accountId: string,
  input: CreateAllowlistEntryInput,
): Promise<{ entry: AllowlistEntryView; created: boolean }> {
  const address = parseAddress(input.network, input.address, 'address')
  const account = await context.ledger.accounts.require(orgId, accountId)
  await context.screening.screen({ orgId, accountId: account.id, network: input.network, address }, 'address')
  const existing = await repo.findLiveEntry(context.db, orgId, account.id, input.network, address)
  if (existing) return { entry: toAllowlistEntryView(existing), created: false }
  const now = context.clock.now(orgId)
  const inserted = await context.db.transaction(async (tx) => {
    const row = await repo.insertEntry(tx, {
      id: newId('alw'),
      orgId,
      accountId: account.id,
      network: input.network,
      address,
      label: input.label ?? null,
      state: 'registered',
      activatesAt: new Date(now.getTime() + ALLOWLIST_TIMELOCK_MS),
      createdAt: now,
    })
    if (row) await appendEvent(tx, { orgId, type: 'treasury.allowlist.created', data: { ...eventData(row), activatesAt: row.activatesAt.toISOString() }, created: now })
    return row
  })
  if (inserted) {
    context.wakeSweep(context.clock.wallMsAt(orgId, inserted.activatesAt.getTime()))
    return { entry: toAllowlistEntryView(inserted), created: true }
  }
  // A concurrent registration of the same destination won; answer its entry.
  const winner = await repo.findLiveEntry(context.db, orgId, account.id, input.network, address)
  if (!winner) throw new ApiError('conflict', 'The destination changed while it was being registered; try again')
  return { entry: toAllowlistEntryView(winner), created: false }
}

export async function getEntry(context: AllowlistContext, orgId: string, id: string): Promise<AllowlistEntryView> {
  const row = await repo.findEntry(context.db, orgId, id)
  if (!row) throw notFound('allowlist entry')
  return toAllowlistEntryView(row)
}

export async function listEntries(context: AllowlistContext, orgId: string, accountId: string, query: { after?: string; limit?: number }): Promise<{ entries: AllowlistEntryView[]; hasMore: boolean }> {
  const limit = pageLimit(query.limit)
  const account = await context.ledger.accounts.require(orgId, accountId)
  const rows = await repo.listEntries(context.db, orgId, account.id, { after: query.after, limit: limit + 1 })
  const page = onePage(rows, limit, toAllowlistEntryView)
  return { entries: page.items, hasMore: page.hasMore }
}

/** Removes an entry: new withdrawals can no longer name it; withdrawals already made continue. Removing twice answers the removed entry. */
export async function removeEntry(context: AllowlistContext, orgId: string, id: string): Promise<AllowlistEntryView> {
  const now = context.clock.now(orgId)
  const removed = await context.db.transaction(async (tx) => {
    const row = await repo.markRemoved(tx, orgId, id, now)
    if (row) await appendEvent(tx, { orgId, type: 'treasury.allowlist.removed', data: eventData(row), created: now })
    return row
  })
  if (removed) return toAllowlistEntryView(removed)
  return getEntry(context, orgId, id)
}

/** Activates an organization's entries whose timelock has elapsed, each with `treasury.allowlist.activated` in the same commit. */
export async function activateDueEntries(context: AllowlistContext, orgId: string): Promise<number> {
  const now = context.clock.now(orgId)
  return context.db.transaction(async (tx) => {
    const activated = await repo.activateDue(tx, orgId, now, ACTIVATION_BATCH_MAX)
    for (const row of activated) await appendEvent(tx, { orgId, type: 'treasury.allowlist.activated', data: eventData(row), created: now })
    return activated.length
  })
}

/**
 * One pass: activates the entries of every organization whose first timelock has ended on its own
 * clock, and answers when the next one ends (wall clock), or undefined when none is in its timelock.
 */
export async function activateAllDue(context: AllowlistContext): Promise<number | undefined> {
  const pending = await repo.pendingActivations(context.db)
  const now = context.clock.wallNowMs()
  const due = pending.filter((row) => row.dueAt !== null && context.clock.wallMsAt(row.orgId, row.dueAt.getTime()) <= now)
  if (due.length === 0) return earliestWallMs(context.clock, pending)
  for (const { orgId } of due) {
    try {
      await activateDueEntries(context, orgId)
    } catch (error) {
      console.error(`allowlist: activation for ${orgId} failed; the next sweep retries`, error)
    }
  }
  return earliestWallMs(context.clock, await repo.pendingActivations(context.db))
}

/**
 * The entry a withdrawal names, if it can be used now: `not_found`, or `conflict` while its timelock
 * runs (or once removed). An entry whose timelock has just elapsed is activated here first, so the
 * answer never depends on when the sweep last ran.
 */
export async function requireActiveEntry(context: AllowlistContext, orgId: string, id: string, field: string): Promise<repo.AllowlistEntryRecord> {
  let row = await repo.findEntry(context.db, orgId, id)
  if (!row) throw new ApiError('not_found', 'No such allowlist entry', { field })
  if (row.state === 'registered' && row.activatesAt.getTime() <= context.clock.nowMs(orgId)) {
    await activateDueEntries(context, orgId)
    row = (await repo.findEntry(context.db, orgId, id))!
  }
  if (row.state === 'removed') throw new ApiError('conflict', `Allowlist entry ${id} was removed`, { field })
  if (row.state === 'registered') {
    throw new ApiError('conflict', `Allowlist entry ${id} is in its 24 h timelock until ${row.activatesAt.toISOString()} on the organization's clock`, { field })
  }
  return row
}
