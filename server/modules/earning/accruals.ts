import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import { ApiError, invalid } from '../../lib/errors.ts'
import { formatAmount } from '../../lib/money.ts'
import { onePage, pageLimit } from '../../lib/pagination.ts'
import { requireAsset } from '../../lib/assets.ts'
import { formatPrice } from '../vaults/prices.ts'
import { latestPrice, type VaultRecord } from '../vaults/repo.ts'
import type { VaultCatalog } from '../vaults/service.ts'
import { accrue, DAY_MS, dayAfter, dayStartMs, type Position } from './accrual-math.ts'
import * as repo from './accruals-repo.ts'
import type { AccrualQueryInput, AccrualView, YieldReportQueryInput, YieldReportView } from './policy-model.ts'

/** Days one worker pass computes per vault at most (a worker that was down catches up over passes). */
const DAYS_PER_PASS_MAX = 31
/**
 * A day is computed this long after it ended: an intent is stamped when its settlement starts and
 * committed after, so a settlement running across midnight lands in its day before the day is read.
 */
const DAY_CLOSE_GRACE_MS = 3_600_000
const REPORT_DAYS_MAX = 366
const REPORT_LINES_MAX = 10_000

export interface AccrualDeps {
  db: Database
  ledger: Ledger
  /** Accrual days are UTC days on the vaults' clock, the clock their prices and settlements are stamped with. */
  vaults: VaultCatalog
}

const DAY_PATTERN = /^\d{4}-\d{2}-\d{2}$/

function requireDay(text: string, field: string): string {
  if (!DAY_PATTERN.test(text) || Number.isNaN(Date.parse(`${text}T00:00:00Z`)) || new Date(`${text}T00:00:00Z`).toISOString().slice(0, 10) !== text) {
    throw invalid(field, `${field} is a date, YYYY-MM-DD`)
  }
  return text
}

const ACCRUAL_ID = /^acr_(\d{8})_(.+)$/

export function accrualId(day: string, vaultId: string): string {
  return `acr_${day.replaceAll('-', '')}_${vaultId}`
}

/** Daily accruals per account and vault, their list and the yield reports summing them. */
export class Accruals {
  constructor(private readonly deps: AccrualDeps) {}

  /**
   * Computes one vault's accruals for one closed day and writes them with the day's mark, in one
   * transaction. Computing a day again writes nothing new (rows are keyed by account, vault and
   * day) and answers the same rows.
   */
  async computeDay(vaultId: string, day: string): Promise<repo.AccrualRecord[]> {
    requireDay(day, 'day')
    const vault = await this.deps.vaults.require(vaultId)
    const rows = await this.rowsOf(vault, day)
    await this.deps.db.transaction((tx) => repo.insertDay(tx, vault.id, day, rows, rows[0]?.computedAt ?? this.deps.vaults.now()))
    return rows
  }

  /** The day's rows, computed from settled intents and recorded prices (nothing written). */
  async rowsOf(vault: VaultRecord, day: string): Promise<repo.AccrualRecord[]> {
    const startMs = dayStartMs(day)
    const start = new Date(startMs)
    const end = new Date(startMs + DAY_MS)
    const [opening, changes, points, before] = await Promise.all([
      repo.sharesAt(this.deps.db, vault.id, start),
      repo.shareChanges(this.deps.db, vault.id, start, end),
      repo.pricesIn(this.deps.db, vault.id, start, end),
      latestPrice(this.deps.db, vault.id, start),
    ])
    const open = before?.price ?? points[0]?.price
    if (open === undefined) return []
    const positions = new Map<string, Position>()
    const key = (orgId: string, accountId: string) => `${orgId}\u0000${accountId}`
    for (const row of opening) positions.set(key(row.orgId, row.accountId), { orgId: row.orgId, accountId: row.accountId, sharesOpen: row.shares, changes: [] })
    for (const change of changes) {
      const id = key(change.orgId, change.accountId)
      let position = positions.get(id)
      if (!position) positions.set(id, (position = { orgId: change.orgId, accountId: change.accountId, sharesOpen: 0n, changes: [] }))
      position.changes.push({ atMs: change.atMs, delta: change.delta })
    }
    const prices = { open, points }
    const close = points.length === 0 ? open : points[points.length - 1]!.price
    // Stamped with the day's end, so computing the day again gives identical rows.
    const computedAt = end
    const rows: repo.AccrualRecord[] = []
    for (const position of positions.values()) {
      const figures = accrue(position, prices, startMs, vault.platformFeeBps)
      rows.push({
        orgId: position.orgId,
        accountId: position.accountId,
        vaultId: vault.id,
        day,
        asset: vault.asset,
        ...figures,
        priceOpen: open,
        priceClose: close,
        feeBps: vault.platformFeeBps,
        computedAt,
      })
    }
    return rows
  }

  /** The worker's step: every vault's days over (for DAY_CLOSE_GRACE_MS) and not yet computed, oldest first (at most DAYS_PER_PASS_MAX each). */
  async runOnce(): Promise<number> {
    const today = new Date(this.deps.vaults.now().getTime() - DAY_CLOSE_GRACE_MS).toISOString().slice(0, 10)
    let days = 0
    for (const vault of await this.deps.vaults.list()) {
      const last = await repo.lastComputedDay(this.deps.db, vault.id)
      let day = last === undefined ? vault.createdAt.toISOString().slice(0, 10) : dayAfter(last)
      for (let count = 0; day < today && count < DAYS_PER_PASS_MAX; count++, day = dayAfter(day)) {
        await this.computeDay(vault.id, day)
        days += 1
      }
    }
    return days
  }

  async list(orgId: string, accountId: string, query: AccrualQueryInput): Promise<{ accruals: AccrualView[]; hasMore: boolean }> {
    const limit = pageLimit(query.limit)
    await this.deps.ledger.accounts.require(orgId, accountId)
    const filter = this.filterOf(orgId, { accountId, vaultId: query.vaultId, from: query.from, to: query.to })
    let after: { day: string; vaultId: string } | undefined
    if (query.after !== undefined) {
      const match = ACCRUAL_ID.exec(query.after)
      if (!match) throw invalid('after', 'after is an accrual id (acr_…)')
      after = { day: `${match[1]!.slice(0, 4)}-${match[1]!.slice(4, 6)}-${match[1]!.slice(6)}`, vaultId: match[2]! }
    }
    const rows = await repo.listAccruals(this.deps.db, filter, after, limit + 1)
    const page = onePage(rows, limit, toAccrualView)
    return { accruals: page.items, hasMore: page.hasMore }
  }

  async report(orgId: string, query: YieldReportQueryInput): Promise<YieldReportView> {
    const from = requireDay(query.from, 'from')
    const to = requireDay(query.to, 'to')
    if (to < from) throw invalid('to', 'to is on or after from')
    if ((dayStartMs(to) - dayStartMs(from)) / DAY_MS >= REPORT_DAYS_MAX) throw invalid('to', `A report covers at most ${REPORT_DAYS_MAX} days`)
    if (query.accountId !== undefined) await this.deps.ledger.accounts.require(orgId, query.accountId, 'accountId')
    if (query.vaultId !== undefined) await this.deps.vaults.require(query.vaultId, 'vaultId')
    const totals = await repo.reportTotals(this.deps.db, { orgId, accountId: query.accountId, vaultId: query.vaultId, from, to }, REPORT_LINES_MAX + 1)
    if (totals.length > REPORT_LINES_MAX) throw new ApiError('invalid_request', `The report has more than ${REPORT_LINES_MAX} lines: narrow it by accountId or vaultId`, { field: 'accountId' })
    return {
      from,
      to,
      lines: totals.map((line) => {
        const decimals = requireAsset(line.asset).decimals
        return {
          accountId: line.accountId,
          vaultId: line.vaultId,
          asset: line.asset,
          days: line.days,
          grossYield: formatAmount(line.gross, decimals),
          platformFee: formatAmount(line.fee, decimals),
          netYield: formatAmount(line.net, decimals),
        }
      }),
    }
  }

  private filterOf(orgId: string, filter: { accountId: string; vaultId?: string; from?: string; to?: string }): repo.AccrualFilter {
    return {
      orgId,
      accountId: filter.accountId,
      vaultId: filter.vaultId,
      from: filter.from === undefined ? undefined : requireDay(filter.from, 'from'),
      to: filter.to === undefined ? undefined : requireDay(filter.to, 'to'),
    }
  }
}

export function toAccrualView(row: repo.AccrualRecord): AccrualView {
  const decimals = requireAsset(row.asset).decimals
  const format = (value: bigint) => formatAmount(value, decimals)
  return {
    id: accrualId(row.day, row.vaultId),
    accountId: row.accountId,
    vaultId: row.vaultId,
    day: row.day,
    asset: row.asset,
    sharesOpen: format(row.sharesOpen),
    sharesClose: format(row.sharesClose),
    timeWeightedShares: format(row.timeWeightedShares),
    sharePriceOpen: formatPrice(row.priceOpen),
    sharePriceClose: formatPrice(row.priceClose),
    grossYield: format(row.gross),
    platformFee: format(row.fee),
    netYield: format(row.net),
    platformFeeBps: row.feeBps,
  }
}

/** A report as CSV: a header, then one line per account and vault, amounts as in JSON. */
export function reportCsv(report: YieldReportView): string {
  const lines = ['accountId,vaultId,asset,from,to,days,grossYield,platformFee,netYield']
  for (const line of report.lines) lines.push([line.accountId, line.vaultId, line.asset, report.from, report.to, line.days, line.grossYield, line.platformFee, line.netYield].join(','))
  return `${lines.join('\r\n')}\r\n`
}
