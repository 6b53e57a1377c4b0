import { eq } from 'drizzle-orm'
import type { Database, Transaction } from '../../db/client.ts'
import { accounts } from '../../db/schema/index.ts'
import { ApiError, notFound } from '../lib/errors.ts'

export interface AccountEntry {
  id: string
  orgId: string
  externalId: string
  status: 'active' | 'frozen'
}

/**
 * The accounts the ledger has seen, with their status, so the hot path checks existence and
 * freezes without a database round trip. Accounts are minted elsewhere, so a miss reads Postgres
 * once; freezes go through `setStatus`, which changes the database and this cache together.
 */
export class AccountDirectory {
  private readonly entries = new Map<string, AccountEntry>()

  constructor(private readonly db: Database) {}

  async find(accountId: string): Promise<AccountEntry | undefined> {
    const cached = this.entries.get(accountId)
    if (cached) return cached
    const [row] = await this.db
      .select({ id: accounts.id, orgId: accounts.orgId, externalId: accounts.externalId, status: accounts.status })
      .from(accounts)
      .where(eq(accounts.id, accountId))
    if (!row) return undefined
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

  /** Changes the status; `alsoWrite` runs in the same transaction (the event describing it). */
  async setStatus(accountId: string, status: AccountEntry['status'], alsoWrite: (tx: Transaction, entry: AccountEntry) => Promise<void>): Promise<AccountEntry> {
    const row = await this.db.transaction(async (tx) => {
      const [updated] = await tx
        .update(accounts)
        .set({ status })
        .where(eq(accounts.id, accountId))
        .returning({ id: accounts.id, orgId: accounts.orgId, externalId: accounts.externalId, status: accounts.status })
      if (!updated) throw notFound('account')
      await alsoWrite(tx, updated)
      return updated
    })
    const cached = this.entries.get(accountId)
    if (cached) cached.status = status
    else this.entries.set(accountId, row)
    return row
  }
}

/** The entry when it is the organization's; another organization's account answers exactly like a missing one. */
function ownedBy(orgId: string, entry: AccountEntry | undefined, field?: string): AccountEntry {
  if (!entry || entry.orgId !== orgId) throw new ApiError('not_found', 'No such account', field ? { field } : {})
  return entry
}

/** Frozen accounts can receive but not send. */
export function assertCanSend(account: AccountEntry, field: string): void {
  if (account.status === 'frozen') throw new ApiError('account_frozen', `Account ${account.id} is frozen and cannot send`, { field })
}
