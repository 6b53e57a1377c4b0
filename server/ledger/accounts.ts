import { and, eq, inArray } from 'drizzle-orm'
import type { Database, Transaction } from '../../db/client.ts'
import { ledgerBalances } from '../../db/schema/index.ts'
import { ApiError, notFound } from '../lib/errors.ts'
import type { HotBalances } from './hot-balances.ts'

export interface AccountEntry {
  id: string
  orgId: string
  externalId: string
  status: 'active' | 'frozen'
}

/**
 * Where accounts are stored, which the ledger does not know: the accounts module gives it this
 * (`LedgerOptions.accounts`).
 */
export interface AccountRows {
  /** The accounts with these ids that exist (any order). */
  byIds(db: Database, accountIds: readonly string[]): Promise<AccountEntry[]>
  /** Sets an account's status in `tx`; undefined when there is no such account. */
  setStatus(tx: Transaction, accountId: string, status: AccountEntry['status']): Promise<AccountEntry | undefined>
}

/**
 * The accounts resident in memory: their status, and their balances in `HotBalances`. Residency is
 * per account and on demand: an account becomes resident the first time an operation or a read
 * names it (one round trip reads its row and all its balance rows), and stays resident. Start-up
 * makes resident only what must be (system accounts, and accounts holding funds in `held` or
 * `in_flight`, see `Ledger.load`), so a server with millions of idle accounts starts as fast as one
 * with a few, and its memory grows with the accounts in use, not with the accounts that exist.
 *
 * Every path that moves money resolves its accounts here first (`require`, `find`), and
 * `Ledger.submit` asserts that the accounts of its postings are resident: a balance that is not
 * resident is never decided on, so memory never mistakes "not loaded" for zero.
 */
export class AccountDirectory {
  private readonly entries = new Map<string, AccountEntry>()
  /** First touches under way, so that two requests for one account read it once. */
  private readonly loading = new Map<string, Promise<AccountEntry | undefined>>()

  constructor(
    private readonly db: Database,
    private readonly balances: HotBalances,
    private readonly rows: AccountRows,
  ) {}

  async find(accountId: string): Promise<AccountEntry | undefined> {
    const cached = this.entries.get(accountId)
    if (cached) return cached
    let pending = this.loading.get(accountId)
    if (pending === undefined) {
      pending = this.loadOne(accountId).finally(() => this.loading.delete(accountId))
      this.loading.set(accountId, pending)
    }
    return pending
  }

  /**
   * An account just created and committed: it has no balance rows, so it is resident as it is. An
   * entry already there (a first touch that raced the creation) is kept.
   */
  registerNew(entry: AccountEntry): void {
    if (!this.entries.has(entry.id)) this.entries.set(entry.id, { ...entry })
  }

  /** Makes every account non-resident again (`Ledger.load`, which rebuilds memory as at a restart). */
  forgetAll(): void {
    this.entries.clear()
  }

  /** Makes the organizations' accounts non-resident (`Ledger.forgetOrganizations`). */
  forgetOrganizations(orgIds: ReadonlySet<string>): void {
    for (const [id, entry] of this.entries) if (orgIds.has(entry.orgId)) this.entries.delete(id)
  }

  /** Whether the account and its balances are in memory (operations may be decided on it). */
  isResident(accountId: string): boolean {
    return this.entries.has(accountId)
  }

  /** How many accounts are resident (operators' statistics, tests). */
  residentCount(): number {
    return this.entries.size
  }

  /** Makes accounts resident in bulk (start-up), reading their rows and balances in two queries. */
  async loadMany(accountIds: readonly string[]): Promise<void> {
    const missing = [...new Set(accountIds)].filter((id) => !this.entries.has(id))
    for (let start = 0; start < missing.length; start += LOAD_CHUNK) {
      const chunk = missing.slice(start, start + LOAD_CHUNK)
      const rows = await this.rows.byIds(this.db, chunk)
      const balanceRows = await this.db.select().from(ledgerBalances).where(inArray(ledgerBalances.accountId, chunk))
      for (const row of balanceRows) this.balances.loadIfAbsent(row)
      for (const row of rows) if (!this.entries.has(row.id)) this.entries.set(row.id, row)
    }
  }

  /**
   * A first touch: the account's row and every balance row of it, read together. A balance already
   * in memory is kept (memory may be ahead of the database by what is on its way to it).
   */
  private async loadOne(accountId: string): Promise<AccountEntry | undefined> {
    const [row] = await this.rows.byIds(this.db, [accountId])
    if (!row) return undefined
    const balanceRows = await this.db
      .select()
      .from(ledgerBalances)
      .where(and(eq(ledgerBalances.orgId, row.orgId), eq(ledgerBalances.accountId, accountId)))
    for (const balance of balanceRows) this.balances.loadIfAbsent(balance)
    const entry = this.entries.get(accountId) ?? row
    this.entries.set(accountId, entry)
    return entry
  }

  /**
   * The organization's account if this directory already holds it, without a promise or a turn of
   * the event loop (the authorization's hot path); undefined when it must be read (`require`).
   * Another organization's account answers exactly like a missing one, as from `require`.
   */
  cached(orgId: string, accountId: string, field?: string): AccountEntry | undefined {
    const entry = this.entries.get(accountId)
    return entry === undefined ? undefined : ownedBy(orgId, entry, field)
  }

  /** The organization's account; another organization's answers exactly like a missing one. */
  async require(orgId: string, accountId: string, field?: string): Promise<AccountEntry> {
    return ownedBy(orgId, await this.find(accountId), field)
  }

  /**
   * Changes the status; `alsoWrite` runs in the same transaction (the event describing it). A
   * resident account's entry changes with it; a first touch still under way is waited for first, so
   * that it cannot leave the status it read before this change in memory.
   */
  async setStatus(accountId: string, status: AccountEntry['status'], alsoWrite: (tx: Transaction, entry: AccountEntry) => Promise<void>): Promise<AccountEntry> {
    const row = await this.db.transaction(async (tx) => {
      const updated = await this.rows.setStatus(tx, accountId, status)
      if (!updated) throw notFound('account')
      await alsoWrite(tx, updated)
      return updated
    })
    await this.loading.get(accountId)?.catch(() => undefined)
    const cached = this.entries.get(accountId)
    if (cached) cached.status = status
    return row
  }
}

const LOAD_CHUNK = 10_000

/** The entry when it is the organization's; another organization's account answers exactly like a missing one. */
function ownedBy(orgId: string, entry: AccountEntry | undefined, field?: string): AccountEntry {
  if (!entry || entry.orgId !== orgId) throw new ApiError('not_found', 'No such account', field ? { field } : {})
  return entry
}

/** Frozen accounts can receive but not send. */
export function assertCanSend(account: AccountEntry, field: string): void {
  if (account.status === 'frozen') throw new ApiError('account_frozen', `Account ${account.id} is frozen and cannot send`, { field })
}
