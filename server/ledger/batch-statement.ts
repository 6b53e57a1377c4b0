import { insertFromJson, jsonParameter, OP_COLUMN, ParameterText, StatementTexts, statementWith, textParameter, type TextStatement } from '../../db/bulk.ts'
import { ledgerMovements } from '../../db/schema/index.ts'
import { assert } from '../lib/assert.ts'
import { claimParts, NOT_LOST } from '../platform/idempotency.ts'
import { FENCE_PLACEHOLDER, FENCE_REFUSED_TEXT, fenceText, orgsOf, type CommitFence } from './fence.ts'
import { addDeltas, type BalanceDelta, type HotBalance } from './hot-balances.ts'
import type { LedgerOperation, OwnMovement } from './operation.ts'
import type { CompiledWriteSet, WriteSetRegistry } from './write-sets.ts'

/** The writer's order guard: this batch's place in its writer's sequence. */
export interface BatchOrder {
  writerId: string
  seq: number
}

/** What a batch statement answers: the balance rows it wrote, and the operations whose key was already held. */
export interface BatchResult {
  written: HotBalance[]
  lostOps: Set<number>
}

/** One statement's operations and the balance deltas they reserved (one map per operation, or one for them all). */
export interface BatchContent {
  ops: LedgerOperation[]
  deltas: ReadonlyArray<ReadonlyMap<string, BalanceDelta>>
  /** The batch's place in the writer's order; undefined for a bundle committed aside, outside that order. */
  order: BatchOrder | undefined
}

type Entry = { row: Record<string, unknown>; op: number }

/**
 * The batch as one statement: each table is one data-modifying CTE reading its rows from a jsonb
 * parameter of its own (`jsonParameter`; Postgres parses each array once, where extracting every
 * part from one large document cost about a tenth more Postgres CPU per authorization in
 * `bench/batch-cost.ts`), the order guard's figures are `input`, the balances are updated by
 * adding the batch's deltas (Postgres adds them to what it holds, so its own checks, no negative
 * customer bucket and total = available + held + in flight, judge the real result), the modules'
 * rows follow as their write sets say, and the order guard moves from this batch's predecessor to
 * it or the statement refuses itself. With a commit fence, its condition decides whether the guard
 * moves at all, so a false fence refuses the batch exactly as a lost order does. Operations whose
 * idempotency claim finds the key held are left out of every part and reported back.
 */
export function batchStatement(content: BatchContent, writeSets: WriteSetRegistry, fence: CommitFence | undefined): TextStatement {
  const { ops, order } = content
  const claims = entriesOf(ops, (op) => (op.idempotencyRecord ? [op.idempotencyRecord] : undefined))
  const filtered = claims.length > 0
  const values: Record<string, unknown> = {
    input: { writer: order?.writerId, seq: order?.seq ?? 0, prev: (order?.seq ?? 0) - 1, at: new Date().toISOString() },
  }
  const parts: string[] = []
  // What decides the statement's text, each a string built once and reused: the text is looked up
  // by these, and assembled from `parts` only the first time.
  const key: string[] = [filtered ? 'filtered' : 'unfiltered', order === undefined ? 'aside' : 'ordered']
  const add = (name: string, table: CompiledWriteSet['table'], entries: Entry[], tail?: string) => {
    if (entries.length === 0) return
    const part = insertFromJson(
      table,
      entries.map((entry) => entry.row),
      jsonParameter(name),
      filtered ? { tail, ops: entries.map((entry) => entry.op), opFilter: NOT_LOST } : { tail },
    )
    values[name] = part.rows
    key.push(part.text)
    parts.push(`${name} as (${part.text})`)
  }
  if (filtered) {
    const claimed = claimParts(claims.map((entry) => ({ record: entry.row, op: entry.op })))
    values.claims = claimed.claims
    key.push(claimed.text)
    parts.push(...claimed.parts)
  }
  const fenced = order !== undefined && fence !== undefined
  if (fenced) {
    key.push(fence.condition)
    if (fence.condition.includes(FENCE_PLACEHOLDER)) values.fence = new ParameterText(fence.parameter(orgsOf(ops)))
  }
  // A bundle committed aside is not in the writer's order: its guard always passes (its
  // transaction checks the fence first, see `checkFence`).
  if (order === undefined) parts.push('guard as (select 1 as seq)')
  else parts.push(fenced ? fencedGuard(fence) : GUARD)
  add('movements', ledgerMovements, movementRows(ops))
  values.balances = balanceRows(content.deltas, filtered)
  parts.push(filtered ? BALANCE_DELTAS_PER_OPERATION : BALANCE_DELTAS)
  parts.push(BALANCE_WRITES)
  const written = writeSets.all.map((set) => ({ set, entries: writeSetEntries(ops, set) }))
  for (const { set, entries } of written) if (set.disjointFrom !== undefined) assertDisjoint(set, entries, written.find((other) => other.set.name === set.disjointFrom)?.entries ?? [])
  // The modules' rows in their write sets' order, each in queue order (events go in the same
  // statement as the change they describe: the outbox).
  for (const { set, entries } of written) add(set.name, set.table, entries, set.tail)
  const answers = entriesOf(ops, (op) => (op.idempotencyAnswer ? [op.idempotencyAnswer] : undefined))
  if (answers.length > 0) {
    key.push('answers')
    values.answers = answers.map(({ row, op }) => ({ org_id: row.orgId, key: row.key, response_status: row.responseStatus, response_body: row.responseBody, [OP_COLUMN]: op }))
    parts.push(
      `answers as (update idempotency_records r set response_status = a.response_status, response_body = a.response_body
          from jsonb_to_recordset(${jsonParameter('answers')}) as a(org_id text, key text, response_status integer, response_body text, ${OP_COLUMN} integer)
          where r.org_id = a.org_id and r.key = a.key${filtered ? ` and a.${NOT_LOST}` : ''})`,
    )
  }
  const lostRows = filtered ? `\nunion all select 'lost', op::text, null, null, null, null, null, null, null from lost` : ''
  const text = BATCH_TEXTS.numbered(
    key,
    () => `with input as (select ${jsonParameter('input')} as j), ${parts.join(',\n')}
select 'balance' as part, org_id, account_id, asset, kind, available::text, held::text, in_flight::text, total::text from created
union all select 'balance', org_id, account_id, asset, kind, available::text, held::text, in_flight::text, total::text from updated${lostRows}
union all select 'refused', kassa_refuse(${fenced ? refusalWithFence(fence) : OUT_OF_ORDER}), null, null, null, null, null, null, null
  where not exists (select 1 from guard)`,
  )
  return statementWith(text, values)
}

/** The rows one write set takes from a batch's operations, each with its operation's index. */
function writeSetEntries(ops: LedgerOperation[], set: CompiledWriteSet): Entry[] {
  const field = set.field
  const entries = entriesOf(ops, (op) => {
    if (set.operations === 'recordingMovement' && op.recordedByRow !== true) return undefined
    if (set.operations === 'ownMovement' && op.recordedByRow === true) return undefined
    return op[field] as Array<Record<string, unknown>> | undefined
  })
  return set.lastStatePerId ? lastStatePerId(entries) : entries
}

/** Rows of one kind from every operation of a batch, each with its operation's index. */
function entriesOf<Row>(ops: LedgerOperation[], pick: (op: LedgerOperation) => Row[] | undefined): Array<{ row: Row; op: number }> {
  const rows: Array<{ row: Row; op: number }> = []
  ops.forEach((op, index) => {
    for (const row of pick(op) ?? []) rows.push({ row, op: index })
  })
  return rows
}

/** The last state queued for an id is the one written (queue order is decision order). */
function lastStatePerId(rows: Entry[]): Entry[] {
  const latest = new Map<unknown, Entry>()
  for (const entry of rows) latest.set(entry.row.id, entry)
  return latest.size === rows.length ? rows : [...latest.values()]
}

function assertDisjoint(set: CompiledWriteSet, entries: Entry[], others: Entry[]): void {
  if (entries.length === 0 || others.length === 0) return
  const ids = new Set(others.map((entry) => entry.row.id))
  for (const entry of entries) assert(!ids.has(entry.row.id), `${set.name} row ${String(entry.row.id)} is written by ${set.disjointFrom} too in one batch`)
}

/** The batch's rows of `ledger_movements`: one per operation, but for reservations their payment records. */
function movementRows(ops: LedgerOperation[]): Array<{ row: typeof ledgerMovements.$inferInsert; op: number }> {
  const rows: Array<{ row: typeof ledgerMovements.$inferInsert; op: number }> = []
  for (let index = 0; index < ops.length; index++) {
    const op = ops[index]!
    if (op.recordedByRow !== true) rows.push({ row: movementRow(op), op: index })
  }
  return rows
}

/** An operation's movement with its legs, in posting order (leg i is `amounts[i]` of `assets[i]` on `buckets[i]` of `accounts[i]`). */
function movementRow(op: LedgerOperation & OwnMovement): typeof ledgerMovements.$inferInsert {
  const count = op.postings.length
  const accounts = new Array<string>(count)
  const buckets = new Array<string>(count)
  const assets = new Array<string>(count)
  const amounts = new Array<string>(count)
  for (let leg = 0; leg < count; leg++) {
    const posting = op.postings[leg]!
    accounts[leg] = posting.accountId
    buckets[leg] = posting.bucket
    assets[leg] = posting.asset
    amounts[leg] = posting.amountMinor.toString()
  }
  return { id: op.movementId, orgId: op.orgId, kind: op.movementKind, reference: op.reference, createdAt: op.createdAt, accounts, buckets, assets, amounts }
}

/** The batch's balance deltas: summed per balance, or per operation when claims may leave some out. */
function balanceRows(deltas: BatchContent['deltas'], perOperation: boolean): Array<Record<string, unknown>> {
  const toRow = (delta: BalanceDelta, op?: number) => ({
    org_id: delta.orgId,
    account_id: delta.accountId,
    asset: delta.asset,
    kind: delta.kind,
    available: delta.available.toString(),
    held: delta.held.toString(),
    in_flight: delta.inFlight.toString(),
    ...(op === undefined ? {} : { [OP_COLUMN]: op }),
  })
  if (perOperation) return deltas.flatMap((each, index) => [...each.values()].map((delta) => toRow(delta, index)))
  const combined = new Map<string, BalanceDelta>()
  for (const each of deltas) addDeltas(combined, each)
  return [...combined.values()].map((delta) => toRow(delta))
}

export function readResult(rows: Array<Record<string, string | null>>): BatchResult {
  const written: HotBalance[] = []
  const lostOps = new Set<number>()
  for (const row of rows) {
    if (row.part === 'lost') {
      lostOps.add(Number(row.org_id))
      continue
    }
    assert(row.part === 'balance', `unexpected part ${row.part} in a batch's answer`)
    written.push({
      orgId: row.org_id!,
      accountId: row.account_id!,
      asset: row.asset!,
      kind: row.kind as HotBalance['kind'],
      available: BigInt(row.available!),
      held: BigInt(row.held!),
      inFlight: BigInt(row.in_flight!),
      total: BigInt(row.total!),
    })
  }
  return { written, lostOps }
}

/** The writer's batch statements, numbered once per combination of parts and row shapes. */
const BATCH_TEXTS = new StatementTexts()

/** The order guard moves from the batch's predecessor to it, or not at all. */
const GUARD = `guard as (insert into ledger_writer_sequences (writer_id, seq, updated_at)
        select j ->> 'writer', (j ->> 'seq')::bigint, (j ->> 'at')::timestamptz from input
        on conflict (writer_id) do update set seq = excluded.seq, updated_at = excluded.updated_at
        where ledger_writer_sequences.seq = (select (j ->> 'prev')::bigint from input)
        returning seq)`

/**
 * The order guard with the fence's condition: no row is proposed unless it holds, so neither the
 * guard row's first insert nor its update happens, and the batch refuses itself.
 */
function fencedGuard(fence: CommitFence): string {
  return GUARD.replace(' from input\n', ` from input where (${fenceText(fence, textParameter('fence'))})\n`)
}

const OUT_OF_ORDER = `'ledger writer: batch ' || (select j ->> 'seq' from input) || ' of ' || (select j ->> 'writer' from input) || ' arrived out of order; an earlier batch did not commit'`

/** The refusal's text says which of the two refused: the fence (evaluated again only on this path) or the order. */
function refusalWithFence(fence: CommitFence): string {
  return `case when (${fenceText(fence, textParameter('fence'))}) then ${OUT_OF_ORDER} else '${FENCE_REFUSED_TEXT} ' || (select j ->> 'seq' from input) end`
}

/** The batch's deltas, one row per balance (no operation can be left out). */
const BALANCE_DELTAS = `d as (
  select * from jsonb_to_recordset(${jsonParameter('balances')})
    as d(org_id text, account_id text, asset text, kind text, available numeric, held numeric, in_flight numeric))`

/** The batch's deltas per operation, summed without the operations that lost their claim. */
const BALANCE_DELTAS_PER_OPERATION = `d as (
  select org_id, account_id, asset, kind, sum(available) as available, sum(held) as held, sum(in_flight) as in_flight
  from jsonb_to_recordset(${jsonParameter('balances')})
    as x(org_id text, account_id text, asset text, kind text, available numeric, held numeric, in_flight numeric, ${OP_COLUMN} integer)
  where ${NOT_LOST}
  group by org_id, account_id, asset, kind)`

/**
 * Existing rows are updated by adding the deltas; rows seen for the first time are inserted with
 * the deltas as their values. Both parts read one snapshot, so each row goes to exactly one of them.
 */
const BALANCE_WRITES = `created as (
  insert into ledger_balances (org_id, account_id, asset, kind, available, held, in_flight, total, updated_at)
  select d.org_id, d.account_id, d.asset, d.kind, d.available, d.held, d.in_flight, d.available + d.held + d.in_flight, (select (j ->> 'at')::timestamptz from input)
  from d
  where not exists (select 1 from ledger_balances b where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset)
  returning org_id, account_id, asset, kind, available, held, in_flight, total
),
updated as (
  update ledger_balances as b set
    available = b.available + d.available, held = b.held + d.held, in_flight = b.in_flight + d.in_flight,
    total = b.total + d.available + d.held + d.in_flight, updated_at = (select (j ->> 'at')::timestamptz from input)
  from d
  where b.org_id = d.org_id and b.account_id = d.account_id and b.asset = d.asset
  returning b.org_id, b.account_id, b.asset, b.kind, b.available, b.held, b.in_flight, b.total
)`
