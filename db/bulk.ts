import { getTableColumns, getTableName, sql, type SQL } from 'drizzle-orm'
import type { PgTable } from 'drizzle-orm/pg-core'
import { assert } from '../server/lib/assert.ts'
import { isoOf } from '../server/lib/time.ts'

interface ColumnShape {
  key: string
  name: string
  type: string
  hasDefault: boolean
}

const shapes = new WeakMap<PgTable, ColumnShape[]>()

function columnsOf(table: PgTable): ColumnShape[] {
  let columns = shapes.get(table)
  if (columns === undefined) {
    columns = Object.entries(getTableColumns(table)).map(([key, column]) => ({
      key,
      name: column.name,
      type: column.getSQLType(),
      hasDefault: column.hasDefault,
    }))
    shapes.set(table, columns)
  }
  return columns
}

/** A value as JSON that Postgres' input functions read back exactly (money stays a decimal string). */
function toJson(value: unknown): unknown {
  if (value === undefined || value === null) return null
  if (typeof value === 'bigint') return value.toString()
  if (value instanceof Date) return isoOf(value)
  return value
}

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`

/**
 * Many rows in one statement with one parameter: the rows travel as a JSON array that Postgres
 * unpacks with `jsonb_to_recordset`. The statement's text depends only on the table and its
 * columns, never on the number of rows, so the driver prepares it once and reuses it, and
 * building it costs the same for one row as for a thousand (a VALUES list costs per cell on the
 * client and is a new statement for Postgres at every batch size).
 *
 * Columns with a database default are left out when the rows do not set them; the rows of one call
 * must agree on that. `tail` is constant SQL appended as is (an ON CONFLICT clause, RETURNING):
 * never anything derived from input.
 */
export function bulkInsert<Table extends PgTable>(table: Table, rows: ReadonlyArray<Table['$inferInsert']>, tail = ''): SQL {
  const { shape, payload } = rowsAsJson(table, rows)
  const { head, record, rest } = textOf(table, shape, tail, '')
  return sql`${sql.raw(`${head}(`)}${JSON.stringify(payload)}${sql.raw(`::jsonb) as (${record})${rest}`)}`
}

/** The columns one set of rows writes (those with a database default only when the rows set them). */
interface RowShape {
  present: ColumnShape[]
  defaulted: ColumnShape[]
  /** Insert texts built for this shape, by tail and filter: built once, reused per batch. */
  inserts: Map<string, InsertText>
  /** Whole `insertFromJson` texts for this shape, by source, tail and filter. */
  sourceInserts: Map<string, string>
}

const rowShapes = new WeakMap<PgTable, Map<string, RowShape>>()

function shapeOf(table: PgTable, first: Record<string, unknown>): RowShape {
  const columns = columnsOf(table)
  let byMask = rowShapes.get(table)
  if (byMask === undefined) {
    byMask = new Map()
    rowShapes.set(table, byMask)
  }
  let mask = ''
  for (const column of columns) if (column.hasDefault) mask += first[column.key] === undefined ? '0' : '1'
  let shape = byMask.get(mask)
  if (shape === undefined) {
    assert(columns.length <= FIELDS.length, `${getTableName(table)} has more columns than positional fields`)
    shape = {
      present: columns.filter((column) => !column.hasDefault || first[column.key] !== undefined),
      defaulted: columns.filter((column) => column.hasDefault),
      inserts: new Map(),
      sourceInserts: new Map(),
    }
    byMask.set(mask, shape)
  }
  return shape
}

/** The rows as JSON objects with positional field names, and the shape they share. */
function rowsAsJson(table: PgTable, rows: ReadonlyArray<Record<string, unknown>>, ops?: readonly number[]): { shape: RowShape; payload: Record<string, unknown>[] } {
  assert(rows.length > 0, 'a bulk insert has rows')
  assert(ops === undefined || ops.length === rows.length, 'one operation index per row')
  const first = rows[0]!
  const shape = shapeOf(table, first)
  const { present, defaulted } = shape
  const payload = rows.map((record, row) => {
    const json: Record<string, unknown> = {}
    for (let column = 0; column < present.length; column++) {
      // A null is left out: Postgres reads a missing field as null (jsonb_to_recordset), and
      // spelling it costs both sides for nothing (a payment carries half a dozen).
      const value = record[present[column]!.key]
      if (value !== null && value !== undefined) json[FIELDS[column]!] = toJson(value)
    }
    for (const column of defaulted) {
      assert((record[column.key] === undefined) === (first[column.key] === undefined), `rows of one bulk insert into ${getTableName(table)} disagree on ${column.key}`)
    }
    if (ops !== undefined) json[OP_COLUMN] = ops[row]
    return json
  })
  return { shape, payload }
}

/** The column naming which operation of a batch a row belongs to (see `insertFromJson`). */
export const OP_COLUMN = 'kassa_op'

/**
 * Rows travel with short positional field names (`c0`, `c1`, …) rather than their column names:
 * the JSON is a good part of what Postgres parses per row, and column names repeated in every row
 * would double it.
 */
const fieldOf = (index: number) => `c${index}`
const FIELDS = Array.from({ length: 128 }, (_, index) => fieldOf(index))

/** The statement text for a shape, built once per tail and filter. */
function textOf(table: PgTable, shape: RowShape, tail: string, opFilter: string): InsertText {
  const key = `${tail}\n${opFilter}`
  let text = shape.inserts.get(key)
  if (text === undefined) {
    text = insertText(table, shape.present, tail, opFilter)
    shape.inserts.set(key, text)
  }
  return text
}

/** An insert's text around its JSON source: `head(source) as (record)rest`. */
interface InsertText {
  head: string
  record: string
  rest: string
}

function insertText(table: PgTable, present: ColumnShape[], tail: string, opFilter: string): InsertText {
  const names = present.map((column) => quoted(column.name)).join(', ')
  const fields = present.map((_, index) => fieldOf(index)).join(', ')
  const record = present.map((column, index) => `${fieldOf(index)} ${column.type}`).join(', ') + (opFilter === '' ? '' : `, ${OP_COLUMN} integer`)
  const aliases = opFilter === '' ? fields : `${fields}, ${OP_COLUMN}`
  // WITH ORDINALITY and ORDER BY keep the rows in the order given (serial columns follow it).
  return {
    head: `insert into ${quoted(getTableName(table))} (${names}) select ${fields} from rows from (jsonb_to_recordset`,
    record,
    rest: `) with ordinality as r(${aliases}, kassa_row_order)${opFilter === '' ? '' : ` where ${opFilter}`} order by kassa_row_order${tail === '' ? '' : ` ${tail}`}`,
  }
}

/**
 * One insert of a multi-part statement whose rows travel as a JSON array: `source` is SQL naming
 * the jsonb array (for instance a parameter of the statement). Answers the insert's text and the
 * rows to send as that array.
 *
 * With `ops`, each row carries the index of the operation it belongs to, and `opFilter` (constant
 * SQL over the `kassa_op` column) decides which rows are written: a batch can leave out the
 * operations that lost their idempotency claim in the same statement.
 */
export function insertFromJson<Table extends PgTable>(
  table: Table,
  rows: ReadonlyArray<Table['$inferInsert']>,
  source: string,
  options: { tail?: string; ops?: readonly number[]; opFilter?: string } = {},
): { text: string; rows: Record<string, unknown>[] } {
  const { shape, payload } = rowsAsJson(table, rows, options.ops)
  const opFilter = options.ops === undefined ? '' : (options.opFilter ?? 'true')
  const cacheKey = `${source}\n${options.tail ?? ''}\n${opFilter}`
  let text = shape.sourceInserts.get(cacheKey)
  if (text === undefined) {
    const { head, record, rest } = textOf(table, shape, options.tail ?? '', opFilter)
    text = `${head}(${source}) as (${record})${rest}`
    shape.sourceInserts.set(cacheKey, text)
  }
  return { text, rows: payload }
}

const PARAMETER_MARK = '\u0001'

/**
 * SQL naming a jsonb parameter of a multi-part statement, by name: each part reads its rows from a
 * parameter of its own. The mark is replaced by the parameter when the statement is assembled
 * (`jsonStatement`); it never meets input.
 */
export const jsonParameter = (name: string) => `${PARAMETER_MARK}${name}${PARAMETER_MARK}::jsonb`

/**
 * SQL naming a parameter of a multi-part statement that is not read as jsonb: its SQL decides its
 * type. Its value is given as a `ParameterText`, sent as it is.
 */
export const textParameter = (name: string) => `${PARAMETER_MARK}${name}${PARAMETER_MARK}`

/** A parameter's value sent as it is, where other values are sent as their JSON. */
export class ParameterText {
  constructor(readonly text: string) {}
}

/** A statement ready for the driver: its text with numbered parameters, and their values. */
export interface TextStatement {
  text: string
  params: string[]
}

/** A marked text's numbered form: each name is one parameter, however many parts read it. */
export interface NumberedText {
  text: string
  names: string[]
}

/** Bound on the numbered texts kept by each cache: only a bug would put data in a text. */
const NUMBERED_TEXTS_MAX = 4096

function numberText(marked: string): NumberedText {
  const names: string[] = []
  const text = marked
    .split(PARAMETER_MARK)
    .map((piece, index) => {
      if (index % 2 === 0) return piece
      const position = names.indexOf(piece)
      return `$${position >= 0 ? position + 1 : names.push(piece)}`
    })
    .join('')
  return { text, names }
}

/**
 * Numbered forms by marked text. A batch statement's text depends only on which parts it has and
 * their row shapes, so a handful of texts serve every batch.
 */
const numberedTexts = new Map<string, NumberedText>()

function numbered(marked: string): NumberedText {
  let found = numberedTexts.get(marked)
  if (found === undefined) {
    found = numberText(marked)
    if (numberedTexts.size >= NUMBERED_TEXTS_MAX) numberedTexts.clear()
    numberedTexts.set(marked, found)
  }
  return found
}

interface TextNode {
  next: Map<string, TextNode>
  text?: NumberedText
}

/**
 * Numbered statement texts found without building them: by a key of strings that together decide
 * the text and are themselves built once and reused (constant SQL, the texts `insertFromJson`
 * caches per shape). Looking one up hashes only strings whose hashes are already known, where
 * assembling a writer batch's text of about 5 KB for every batch and looking it up by content cost
 * about a fifth of building the batch and, with the driver's copy of it, most of what a lone
 * authorization allocated.
 */
export class StatementTexts {
  private readonly root: TextNode = { next: new Map() }
  private count = 0

  /** The numbered form of what `assemble` builds (marked as for `jsonStatement`), assembled once per key. */
  numbered(key: readonly string[], assemble: () => string): NumberedText {
    let node = this.root
    for (const piece of key) {
      let next = node.next.get(piece)
      if (next === undefined) {
        next = { next: new Map() }
        node.next.set(piece, next)
      }
      node = next
    }
    if (node.text === undefined) {
      if (this.count >= NUMBERED_TEXTS_MAX) {
        this.root.next.clear()
        this.count = 0
      }
      node.text = numberText(assemble())
      this.count += 1
    }
    return node.text
  }
}

/**
 * Statement text with `jsonParameter(name)` marks, with `values[name]` as JSON for each mark. The
 * numbered text is worked out once per distinct text, so a batch pays only for its values'
 * JSON, not for assembling the statement again (which cost a lone authorization's batch more
 * than its rows did).
 */
export function jsonStatement(marked: string, values: Record<string, unknown>): TextStatement {
  return statementWith(numbered(marked), values)
}

/** A numbered text with `values[name]` as JSON for each of its parameters. */
export function statementWith({ text, names }: NumberedText, values: Record<string, unknown>): TextStatement {
  const params = names.map((name) => {
    assert(name in values, `the statement reads a parameter ${name} it was not given`)
    const value = values[name]
    return value instanceof ParameterText ? value.text : JSON.stringify(value)
  })
  return { text, params }
}

/** `ON CONFLICT (<target>) DO UPDATE SET` each of `columns` to the proposed row's value. */
export function upsertTail(target: string, columns: readonly string[]): string {
  return `on conflict (${target}) do update set ${columns.map((column) => `${quoted(column)} = excluded.${quoted(column)}`).join(', ')}`
}
