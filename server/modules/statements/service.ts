import type { Database } from '../../../db/client.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { isId } from '../../lib/ids.ts'
import { pageLimit, onePage } from '../../lib/pagination.ts'
import { requireAsset } from '../../lib/assets.ts'
import { addDays, businessDateOf, canonicalTimeZone, isTimeZone, parseDate, type BusinessDay } from './business-day.ts'
import type { SignedStatement } from './document.ts'
import type { StatementView } from './model.ts'
import { statementCsv } from './render-csv.ts'
import * as repo from './repo.ts'

export interface StatementsServiceDeps {
  db: Database
  /** Refuses (not_found) an account the organization does not have. */
  requireAccount(orgId: string, accountId: string): Promise<unknown>
  nowMs(orgId: string): number
}

export type StatementFormat = 'json' | 'csv' | 'pdf'

function viewOf(row: { body: string; hash: string; signature: string }): StatementView {
  return { ...(JSON.parse(row.body) as Omit<StatementView, 'hash' | 'signature'>), hash: row.hash, signature: row.signature }
}

function requireDate(value: string | undefined, field: string): string | undefined {
  if (value === undefined) return undefined
  if (Number.isNaN(parseDate(value))) throw invalid(field, `${field} must be a date written YYYY-MM-DD`)
  return value
}

export class StatementsService {
  constructor(private readonly deps: StatementsServiceDeps) {}

  async list(orgId: string, accountId: string, query: { asset?: string; from?: string; to?: string; after?: string; limit?: number }) {
    const limit = pageLimit(query.limit)
    const from = requireDate(query.from, 'from')
    const to = requireDate(query.to, 'to')
    if (from !== undefined && to !== undefined && from > to) throw invalid('to', 'to must not be before from')
    const asset = query.asset === undefined ? undefined : requireAsset(query.asset).asset
    await this.deps.requireAccount(orgId, accountId)
    let after: { businessDate: string; asset: string } | undefined
    if (query.after !== undefined) {
      const row = isId('stmt', query.after) ? await repo.readStatement(this.deps.db, orgId, query.after) : undefined
      if (row === undefined || row.accountId !== accountId) throw invalid('after', 'after must be a statement of this account')
      after = { businessDate: row.businessDate, asset: row.asset }
    }
    const rows = await repo.listStatements(this.deps.db, { orgId, accountId, asset, from, to, after, limit })
    const page = onePage(rows, limit, viewOf)
    return { statements: page.items, hasMore: page.hasMore }
  }

  async get(orgId: string, id: string): Promise<StatementView> {
    const row = isId('stmt', id) ? await repo.readStatement(this.deps.db, orgId, id) : undefined
    if (row === undefined) throw notFound('statement')
    return viewOf(row)
  }

  /** The statement in the asked form: the body and its content type. */
  async render(orgId: string, id: string, format: StatementFormat): Promise<{ body: string | Uint8Array; contentType: string; filename: string }> {
    const statement = (await this.get(orgId, id)) as SignedStatement
    const filename = `statement-${statement.accountId}-${statement.asset}-${statement.businessDate}`
    if (format === 'csv') return { body: statementCsv(statement), contentType: 'text/csv; charset=utf-8', filename: `${filename}.csv` }
    if (format === 'pdf') {
      // Loaded on the first PDF asked for: pdf-lib and its fonts are a sixth of what the server
      // imports before it can answer at all.
      const { statementPdf } = await import('./render-pdf.ts')
      return { body: await statementPdf(statement), contentType: 'application/pdf', filename: `${filename}.pdf` }
    }
    return { body: JSON.stringify(statement), contentType: 'application/json;charset=utf-8', filename: `${filename}.json` }
  }

  async businessDay(orgId: string) {
    await this.requireOrganization(orgId)
    const day = await repo.readBusinessDay(this.deps.db, orgId)
    return { orgId, timeZone: day.timeZone, cutoffHour: day.cutoffHour, nextBusinessDate: await this.nextBusinessDate(orgId, day) }
  }

  /** Sets the organization's time zone and cut-off hour; dates already sealed keep theirs. */
  async setBusinessDay(orgId: string, input: { timeZone: string; cutoffHour: number }) {
    if (!isTimeZone(input.timeZone)) throw invalid('timeZone', 'timeZone must be an IANA time zone such as Europe/Berlin or UTC')
    if (!Number.isInteger(input.cutoffHour) || input.cutoffHour < 0 || input.cutoffHour > 23) throw invalid('cutoffHour', 'cutoffHour must be a whole hour from 0 to 23')
    await this.requireOrganization(orgId)
    const day: BusinessDay = { timeZone: canonicalTimeZone(input.timeZone), cutoffHour: input.cutoffHour }
    await repo.writeBusinessDay(this.deps.db, orgId, day, new Date(this.deps.nowMs(orgId)))
    return this.businessDay(orgId)
  }

  private async requireOrganization(orgId: string): Promise<void> {
    if (!(await repo.organizationExists(this.deps.db, orgId))) throw new ApiError('not_found', 'No such organization')
  }

  private async nextBusinessDate(orgId: string, day: BusinessDay): Promise<string | null> {
    const last = await repo.lastSealedDay(this.deps.db, orgId)
    if (last) return addDays(last.businessDate, 1)
    const first = await repo.firstMovementAt(this.deps.db, orgId)
    return first ? businessDateOf(first.getTime(), day) : null
  }
}

/** The form asked for: `format` first, then the Accept header; JSON when neither names CSV or PDF. */
export function formatOf(format: string | undefined, accept: string | null): StatementFormat {
  if (format !== undefined) {
    if (format === 'json' || format === 'csv' || format === 'pdf') return format
    throw invalid('format', 'format must be one of json, csv, pdf')
  }
  const wanted = (accept ?? '').toLowerCase()
  if (wanted.includes('application/pdf')) return 'pdf'
  if (wanted.includes('text/csv')) return 'csv'
  return 'json'
}
