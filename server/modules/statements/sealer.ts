import type { Database } from '../../../db/client.ts'
import { assert } from '../../lib/assert.ts'
import { newId } from '../../lib/ids.ts'
import { formatAmount } from '../../lib/money.ts'
import { addDays, businessDateOf, cutoffOf, type BusinessDay } from './business-day.ts'
import { canonicalJson, sha256Hex, type StatementBody, type StatementLine } from './document.ts'
import * as repo from './repo.ts'
import type { StatementKeyRing } from './signing.ts'

export const STATEMENT_SEALED_EVENT = 'statement.sealed'

/**
 * How far before a period's start the sealer looks for movements booked before it that committed
 * only after the previous date was sealed: such a movement belongs to the next statement (the first
 * sealed after it committed), never to none.
 */
export const LATE_COMMIT_LOOKBACK_MS = 3_600_000

/** Dates one organization seals in one pass at most; a clock moved a year ahead catches up over a few passes. */
const DATES_PER_PASS_MAX = 62

/** Signatures started at once: WebCrypto signs each one synchronously, the awaits are what this batches. */
const SIGNING_BATCH = 1000

export interface SealerDeps {
  db: Database
  /** The organization's clock (sandbox clocks included). */
  nowMs(orgId: string): number
  /** Waits until everything this process's ledger accepted has committed or failed. */
  drainLedger(): Promise<void>
  keys: StatementKeyRing
  /** How long after a cut-off its date is sealed, so that movements booked just before it have committed. */
  settleMs: number
  decimalsOf(asset: string): number | undefined
}

export interface SealedDate {
  orgId: string
  businessDate: string
  statements: number
}

type BalanceKey = string
const keyOf = (accountId: string, asset: string): BalanceKey => `${accountId}\u0000${asset}`

interface PendingLine {
  movementId: string
  kind: string
  reference: string
  bookedAtMs: number
  amount: bigint
}

/**
 * Seals each organization's business dates, in order, once their cut-off plus the settle time has
 * passed on the organization's clock. Sealing a date twice writes nothing the second time (its day
 * row is the guard, in the same commit as its statements), across instances too.
 */
export class StatementSealer {
  constructor(private readonly deps: SealerDeps) {}

  /** One pass over every organization; answers the dates it sealed. */
  async runOnce(): Promise<SealedDate[]> {
    const sealed: SealedDate[] = []
    await this.deps.drainLedger()
    await this.deps.keys.refresh()
    for (const orgId of await repo.organizationIds(this.deps.db)) {
      sealed.push(...(await this.sealOrganization(orgId)))
    }
    return sealed
  }

  /** Seals the organization's dates that are due and not sealed yet, oldest first. */
  async sealOrganization(orgId: string): Promise<SealedDate[]> {
    const { db } = this.deps
    const day = await repo.readBusinessDay(db, orgId)
    const last = await repo.lastSealedDay(db, orgId)
    let date: string
    let startMs: number
    // Where the previous sealed period began: late commits are looked for no earlier than that.
    let previousStartMs: number | undefined
    if (last) {
      date = addDays(last.businessDate, 1)
      startMs = last.periodEnd.getTime()
      previousStartMs = last.periodStart.getTime()
    } else {
      const first = await repo.firstMovementAt(db, orgId)
      if (first === undefined) return []
      date = businessDateOf(first.getTime(), day)
      startMs = cutoffOf(addDays(date, -1), day)
    }
    const sealed: SealedDate[] = []
    for (let count = 0; count < DATES_PER_PASS_MAX; count++) {
      // A period never runs backwards, even when the organization moved its cut-off earlier.
      const endMs = Math.max(cutoffOf(date, day), startMs)
      if (this.deps.nowMs(orgId) < endMs + this.deps.settleMs) break
      const statements = await this.sealDate(orgId, date, startMs, endMs, day, previousStartMs)
      if (statements !== undefined) sealed.push({ orgId, businessDate: date, statements })
      date = addDays(date, 1)
      previousStartMs = startMs
      startMs = endMs
    }
    return sealed
  }

  /** Seals one date; undefined when another sealer got there first. */
  private async sealDate(orgId: string, businessDate: string, startMs: number, endMs: number, day: BusinessDay, previousStartMs: number | undefined): Promise<number | undefined> {
    const { db, keys } = this.deps
    const previousDate = addDays(businessDate, -1)
    // Only the previous date's statements are consulted for what was stated, so the look-back stays
    // inside its period (one shortened by a change of cut-off included); none before the first date.
    const lookbackMs = previousStartMs === undefined ? startMs : Math.max(startMs - LATE_COMMIT_LOOKBACK_MS, previousStartMs)
    const snapshot = await repo.readLedgerSnapshot(db, orgId, lookbackMs)
    const previous = new Map((await repo.statementsOfDate(db, orgId, previousDate)).map((row) => [keyOf(row.accountId, row.asset), row]))

    // Movements booked before the period that the previous date's statements did not state: they
    // committed after it was sealed, and belong here.
    const lateCandidates = snapshot.movements.filter((movement) => movement.createdAtMs < startMs)
    const stated = new Set<string>()
    if (lateCandidates.length > 0) {
      const accounts = [...new Set(lateCandidates.flatMap((movement) => movement.accounts))]
      for (const body of await repo.statementBodies(db, orgId, previousDate, accounts)) {
        for (const line of (JSON.parse(body) as StatementBody).lines) stated.add(line.movementId)
      }
    }

    const lines = new Map<BalanceKey, PendingLine[]>()
    const bookedAfterCutoff = new Map<BalanceKey, bigint>()
    for (const movement of snapshot.movements) {
      const after = movement.createdAtMs >= endMs
      if (!after && movement.createdAtMs < startMs && stated.has(movement.id)) continue
      for (const [key, amount] of netByAccount(movement)) {
        if (amount === 0n) continue
        if (after) bookedAfterCutoff.set(key, (bookedAfterCutoff.get(key) ?? 0n) + amount)
        else {
          let list = lines.get(key)
          if (list === undefined) lines.set(key, (list = []))
          list.push({ movementId: movement.id, kind: movement.kind, reference: movement.reference, bookedAtMs: movement.createdAtMs, amount })
        }
      }
    }

    const key = keys.current()
    const sealedAt = new Date(this.deps.nowMs(orgId))
    const drafts: StatementDraft[] = []
    for (const balance of snapshot.balances) {
      const balanceKey = keyOf(balance.accountId, balance.asset)
      const before = previous.get(balanceKey)
      const own = lines.get(balanceKey) ?? []
      const atCutoff = balance.total - (bookedAfterCutoff.get(balanceKey) ?? 0n)
      if (before === undefined && own.length === 0 && atCutoff === 0n) continue
      drafts.push({ accountId: balance.accountId, asset: balance.asset, before, lines: own, atCutoff })
    }
    const period = { businessDate, startMs, endMs, day, keyId: key.kid, sealedAt: sealedAt.toISOString() }
    const dayRow: repo.StatementDayRow = {
      orgId,
      businessDate,
      periodStart: new Date(startMs),
      periodEnd: new Date(endMs),
      timeZone: day.timeZone,
      cutoffHour: day.cutoffHour,
      statements: drafts.length,
      sealedAt,
    }
    const decimalsOf = this.deps.decimalsOf
    // Built, hashed and signed a chunk at a time inside the commit: a date of 100,000 accounts never
    // has all its statement texts in memory at once.
    async function* chunks(): AsyncIterable<{ statements: repo.StatementRow[]; events: repo.EventInsert[] }> {
      for (let from = 0; from < drafts.length; from += repo.SEAL_CHUNK_ROWS) {
        const bodies = drafts.slice(from, from + repo.SEAL_CHUNK_ROWS).map((draft) => statementBody(draft, period, decimalsOf))
        // The stored body is the canonical text that was hashed, byte for byte.
        const texts = bodies.map((body) => canonicalJson(body))
        const hashes = texts.map((text) => sha256Hex(text))
        const signatures: string[] = []
        for (let start = 0; start < hashes.length; start += SIGNING_BATCH) {
          signatures.push(...(await Promise.all(hashes.slice(start, start + SIGNING_BATCH).map((hash) => keys.sign(key, hash)))))
        }
        yield {
          statements: bodies.map((body, index) => ({
            id: body.id,
            orgId,
            accountId: body.accountId,
            asset: body.asset,
            businessDate,
            periodStart: dayRow.periodStart,
            periodEnd: dayRow.periodEnd,
            closingBalance: drafts[from + index]!.closing!,
            lineCount: body.lines.length,
            invariantOk: body.invariantOk,
            previousHash: body.previousHash,
            hash: hashes[index]!,
            keyId: key.kid,
            signature: signatures[index]!,
            body: texts[index]!,
            sealedAt,
          })),
          events: bodies.map((body, index) => ({
            id: newId('evt'),
            orgId,
            type: STATEMENT_SEALED_EVENT,
            data: {
              statementId: body.id,
              accountId: body.accountId,
              asset: body.asset,
              businessDate,
              openingBalance: body.openingBalance,
              closingBalance: body.closingBalance,
              lineCount: body.lines.length,
              invariantOk: body.invariantOk,
              hash: hashes[index]!,
            },
            createdAt: sealedAt,
          })),
        }
      }
    }
    const written = await repo.insertSealedDay(db, dayRow, chunks)
    return written ? drafts.length : undefined
  }
}

/** What a statement is made of before it is written out, hashed and signed. */
interface StatementDraft {
  accountId: string
  asset: string
  before: repo.PreviousStatement | undefined
  lines: PendingLine[]
  atCutoff: bigint
  /** Set when its body is built. */
  closing?: bigint
}

interface Period {
  businessDate: string
  startMs: number
  endMs: number
  day: BusinessDay
  keyId: string
  sealedAt: string
}

function statementBody(draft: StatementDraft, period: Period, decimalsOf: (asset: string) => number | undefined): StatementBody {
  const decimals = decimalsOf(draft.asset)
  assert(decimals !== undefined, `a balance in an asset of the catalog (${draft.asset})`)
  const opening = draft.before?.closingBalance ?? 0n
  let running = opening
  const lines: StatementLine[] = draft.lines.map((line) => {
    running += line.amount
    return {
      movementId: line.movementId,
      kind: line.kind,
      reference: line.reference,
      bookedAt: new Date(line.bookedAtMs).toISOString(),
      amount: formatAmount(line.amount, decimals),
      balanceAfter: formatAmount(running, decimals),
    }
  })
  draft.closing = running
  return {
    object: 'statement',
    id: newId('stmt'),
    accountId: draft.accountId,
    asset: draft.asset,
    businessDate: period.businessDate,
    timeZone: period.day.timeZone,
    cutoffHour: period.day.cutoffHour,
    periodStart: new Date(period.startMs).toISOString(),
    periodEnd: new Date(period.endMs).toISOString(),
    openingBalance: formatAmount(opening, decimals),
    closingBalance: formatAmount(running, decimals),
    ledgerBalanceAtCutoff: formatAmount(draft.atCutoff, decimals),
    invariantOk: running === draft.atCutoff,
    lines,
    previousStatementId: draft.before?.id ?? null,
    previousHash: draft.before?.hash ?? null,
    keyId: period.keyId,
    sealedAt: period.sealedAt,
  }
}

/** A movement's net effect on each account's total in each asset (a move between buckets of one account nets to zero). */
function netByAccount(movement: repo.BookedMovement): Map<BalanceKey, bigint> {
  const net = new Map<BalanceKey, bigint>()
  for (let leg = 0; leg < movement.amounts.length; leg++) {
    const key = keyOf(movement.accounts[leg]!, movement.assets[leg]!)
    net.set(key, (net.get(key) ?? 0n) + movement.amounts[leg]!)
  }
  return net
}
