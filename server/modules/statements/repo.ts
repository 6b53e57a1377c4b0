import { and, asc, desc, eq, gte, inArray, lte, sql } from 'drizzle-orm'
import { bulkInsert } from '../../../db/bulk.ts'
import { queryRows, type Database, type Executor } from '../../../db/client.ts'
import { businessDays, events, organizations, statementDays, statements } from '../../../db/schema/index.ts'
import { DEFAULT_BUSINESS_DAY, type BusinessDay } from './business-day.ts'

export type StatementRow = typeof statements.$inferInsert
export type StatementDayRow = typeof statementDays.$inferInsert
export type EventInsert = typeof events.$inferInsert

/** Rows per insert statement when a day is sealed: one JSON parameter each, a few megabytes at most. */
const INSERT_CHUNK_ROWS = 2000

export async function readBusinessDay(db: Executor, orgId: string): Promise<BusinessDay & { updatedAt?: Date }> {
  const [row] = await db.select().from(businessDays).where(eq(businessDays.orgId, orgId))
  return row ? { timeZone: row.timeZone, cutoffHour: row.cutoffHour, updatedAt: row.updatedAt } : { ...DEFAULT_BUSINESS_DAY }
}

export async function writeBusinessDay(db: Executor, orgId: string, day: BusinessDay, now: Date): Promise<void> {
  await db
    .insert(businessDays)
    .values({ orgId, timeZone: day.timeZone, cutoffHour: day.cutoffHour, updatedAt: now })
    .onConflictDoUpdate({ target: businessDays.orgId, set: { timeZone: day.timeZone, cutoffHour: day.cutoffHour, updatedAt: now } })
}

export async function organizationExists(db: Executor, orgId: string): Promise<boolean> {
  const rows = await db.select({ id: organizations.id }).from(organizations).where(eq(organizations.id, orgId))
  return rows.length > 0
}

export async function organizationIds(db: Executor): Promise<string[]> {
  const rows = await db.select({ id: organizations.id }).from(organizations).orderBy(asc(organizations.id))
  return rows.map((row) => row.id)
}

export async function lastSealedDay(db: Executor, orgId: string): Promise<{ businessDate: string; periodStart: Date; periodEnd: Date } | undefined> {
  const [row] = await db
    .select({ businessDate: statementDays.businessDate, periodStart: statementDays.periodStart, periodEnd: statementDays.periodEnd })
    .from(statementDays)
    .where(eq(statementDays.orgId, orgId))
    .orderBy(desc(statementDays.businessDate))
    .limit(1)
  return row
}

/** When the organization's first movement was booked; undefined while it has none. */
export async function firstMovementAt(db: Executor, orgId: string): Promise<Date | undefined> {
  const [row] = await queryRows<{ first: string | Date | null }>(db, sql`select min(created_at) as first from ledger_movements where org_id = ${orgId}`)
  return row?.first ? new Date(row.first) : undefined
}

export interface CustomerBalance {
  accountId: string
  asset: string
  total: bigint
}

export interface BookedMovement {
  id: string
  kind: string
  reference: string
  createdAtMs: number
  accounts: string[]
  assets: string[]
  amounts: bigint[]
}

/**
 * The organization's customer balances and every movement it booked from `fromMs` on, read in one
 * snapshot, so that the balances less the movements booked after a cut-off are the ledger at that
 * cut-off exactly, whatever commits meanwhile.
 */
export async function readLedgerSnapshot(db: Database, orgId: string, fromMs: number): Promise<{ balances: CustomerBalance[]; movements: BookedMovement[] }> {
  return db.transaction(
    async (tx) => {
      const balances = await queryRows<{ account_id: string; asset: string; total: string }>(
        tx,
        sql`select account_id, asset, total::text as total from ledger_balances where org_id = ${orgId} and kind = 'customer'`,
      )
      const movements = await queryRows<{ id: string; kind: string; reference: string; created_at: string | Date; accounts: string[]; assets: string[]; amounts: string[] }>(
        tx,
        sql`select id, kind, reference, created_at, accounts, assets, amounts::text[] as amounts from ledger_movements
            where org_id = ${orgId} and created_at >= ${new Date(fromMs).toISOString()}::timestamptz order by created_at, id`,
      )
      return {
        balances: balances.map((row) => ({ accountId: row.account_id, asset: row.asset, total: BigInt(row.total) })),
        movements: movements.map((row) => ({
          id: row.id,
          kind: row.kind,
          reference: row.reference,
          createdAtMs: new Date(row.created_at).getTime(),
          accounts: row.accounts,
          assets: row.assets,
          amounts: parseNumericArray(row.amounts),
        })),
      }
    },
    { isolationLevel: 'repeatable read', accessMode: 'read only' },
  )
}

/** `amounts::text[]` comes back as an array on postgres.js and may come back as its text form (`{1,-1}`) elsewhere. */
function parseNumericArray(value: string[] | string): bigint[] {
  const items = Array.isArray(value) ? value : value.replace(/^\{|\}$/g, '').split(',')
  return items.map((item) => BigInt(item))
}

export interface PreviousStatement {
  id: string
  accountId: string
  asset: string
  closingBalance: bigint
  hash: string
}

export async function statementsOfDate(db: Executor, orgId: string, businessDate: string): Promise<PreviousStatement[]> {
  return db
    .select({ id: statements.id, accountId: statements.accountId, asset: statements.asset, closingBalance: statements.closingBalance, hash: statements.hash })
    .from(statements)
    .where(and(eq(statements.orgId, orgId), eq(statements.businessDate, businessDate)))
}

/** The bodies of some accounts' statements of one date (to see which movements they already stated). */
export async function statementBodies(db: Executor, orgId: string, businessDate: string, accountIds: string[]): Promise<string[]> {
  if (accountIds.length === 0) return []
  const rows = await db
    .select({ body: statements.body })
    .from(statements)
    .where(and(eq(statements.orgId, orgId), eq(statements.businessDate, businessDate), inArray(statements.accountId, accountIds)))
  return rows.map((row) => row.body)
}

/**
 * Seals one date in one commit: its day row first (a second sealer of the same date finds it and
 * writes nothing), then its statements and their events, a chunk at a time as `chunks` makes them
 * (so the whole date is never in memory at once). Answers false when the date was sealed already.
 */
export async function insertSealedDay(
  db: Database,
  day: StatementDayRow,
  chunks: () => AsyncIterable<{ statements: StatementRow[]; events: EventInsert[] }>,
): Promise<boolean> {
  return db.transaction(async (tx) => {
    const inserted = await tx.insert(statementDays).values(day).onConflictDoNothing().returning({ orgId: statementDays.orgId })
    if (inserted.length === 0) return false
    for await (const chunk of chunks()) {
      if (chunk.statements.length === 0) continue
      await tx.execute(bulkInsert(statements, chunk.statements))
      await tx.execute(bulkInsert(events, chunk.events))
    }
    return true
  })
}

/** Statements per chunk when a date is sealed: one JSON parameter of a few megabytes at most. */
export const SEAL_CHUNK_ROWS = INSERT_CHUNK_ROWS

export interface StatementFilter {
  orgId: string
  accountId: string
  asset?: string
  from?: string
  to?: string
  /** A statement id: the page starts after it (in date order, then asset). */
  after?: { businessDate: string; asset: string }
  limit: number
}

export async function listStatements(db: Executor, filter: StatementFilter): Promise<Array<{ body: string; hash: string; signature: string }>> {
  const conditions = [eq(statements.orgId, filter.orgId), eq(statements.accountId, filter.accountId)]
  if (filter.asset !== undefined) conditions.push(eq(statements.asset, filter.asset))
  if (filter.from !== undefined) conditions.push(gte(statements.businessDate, filter.from))
  if (filter.to !== undefined) conditions.push(lte(statements.businessDate, filter.to))
  if (filter.after !== undefined) {
    conditions.push(
      sql`(${statements.businessDate}, ${statements.asset}) > (${filter.after.businessDate}, ${filter.after.asset})`,
    )
  }
  return db
    .select({ body: statements.body, hash: statements.hash, signature: statements.signature })
    .from(statements)
    .where(and(...conditions))
    .orderBy(asc(statements.businessDate), asc(statements.asset))
    .limit(filter.limit + 1)
}

export async function readStatement(db: Executor, orgId: string, id: string): Promise<{ body: string; hash: string; signature: string; businessDate: string; asset: string; accountId: string } | undefined> {
  const [row] = await db
    .select({ body: statements.body, hash: statements.hash, signature: statements.signature, businessDate: statements.businessDate, asset: statements.asset, accountId: statements.accountId })
    .from(statements)
    .where(and(eq(statements.orgId, orgId), eq(statements.id, id)))
  return row
}

