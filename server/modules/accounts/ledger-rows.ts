import { eq, inArray } from 'drizzle-orm'
import { accounts } from '../../../db/schema/index.ts'
import type { AccountRows } from '../../ledger/accounts.ts'

const ENTRY_COLUMNS = { id: accounts.id, orgId: accounts.orgId, externalId: accounts.externalId, status: accounts.status }

/** The accounts table as the ledger's account directory reads and changes it (`LedgerOptions.accounts`). */
export const accountRows: AccountRows = {
  byIds: (db, accountIds) => db.select(ENTRY_COLUMNS).from(accounts).where(accountIds.length === 1 ? eq(accounts.id, accountIds[0]!) : inArray(accounts.id, [...accountIds])),
  async setStatus(tx, accountId, status) {
    const [updated] = await tx.update(accounts).set({ status }).where(eq(accounts.id, accountId)).returning(ENTRY_COLUMNS)
    return updated
  },
}
