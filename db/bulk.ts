import { getTableColumns, getTableName, sql, type SQL } from 'drizzle-orm'
import type { PgTable } from 'drizzle-orm/pg-core'
import { assert } from '../server/lib/assert.ts'

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
  if (value instanceof Date) return value.toISOString()
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
  assert(rows.length > 0, 'a bulk insert has rows')
  const first = rows[0] as Record<string, unknown>
  const present = columnsOf(table).filter((column) => !column.hasDefault || first[column.key] !== undefined)
  const payload = rows.map((row) => {
    const record = row as Record<string, unknown>
    const json: Record<string, unknown> = {}
    for (const column of present) json[column.name] = toJson(record[column.key])
    for (const column of columnsOf(table)) {
      if (column.hasDefault) assert((record[column.key] === undefined) === (first[column.key] === undefined), `rows of one bulk insert into ${getTableName(table)} disagree on ${column.key}`)
    }
    return json
  })
  const names = present.map((column) => quoted(column.name)).join(', ')
  const record = present.map((column) => `${quoted(column.name)} ${column.type}`).join(', ')
  // WITH ORDINALITY and ORDER BY keep the rows in the order given (serial columns follow it).
  return sql`${sql.raw(`insert into ${quoted(getTableName(table))} (${names}) select ${names} from rows from (jsonb_to_recordset(`)}${JSON.stringify(payload)}${sql.raw(`::jsonb) as (${record})) with ordinality as r(${names}, kassa_row_order) order by kassa_row_order${tail === '' ? '' : ` ${tail}`}`)}`
}

/** `ON CONFLICT (<target>) DO UPDATE SET` each of `columns` to the proposed row's value. */
export function upsertTail(target: string, columns: readonly string[]): string {
  return `on conflict (${target}) do update set ${columns.map((column) => `${quoted(column)} = excluded.${quoted(column)}`).join(', ')}`
}
