import { t } from 'elysia'
import { invalid } from './errors.ts'

export const PAGE_SIZE_DEFAULT = 50
export const PAGE_SIZE_MAX = 200

/**
 * The `limit` query parameter of every list. Its range is checked by `pageLimit`, not by the
 * schema: Elysia coerces query integers through a transform whose range failures lose the
 * parameter's name, and a refusal must name the field.
 */
export const PageLimitQuery = t.Optional(t.Integer({ description: `Page size, 1 to ${PAGE_SIZE_MAX}; ${PAGE_SIZE_DEFAULT} when left out` }))

/** The page size asked for, `fallback` when left out; refused, naming `limit`, outside 1 to `max`. */
export function pageLimit(limit: number | undefined, { fallback = PAGE_SIZE_DEFAULT, max = PAGE_SIZE_MAX } = {}): number {
  const value = limit ?? fallback
  if (!Number.isSafeInteger(value) || value < 1 || value > max) {
    throw invalid('limit', `limit must be a whole number from 1 to ${max}`)
  }
  return value
}

/**
 * Lists fetch one row more than the page; that extra row only says whether another page exists.
 */
export function onePage<Row, View>(rows: Row[], limit: number, toView: (row: Row) => View): { items: View[]; hasMore: boolean } {
  return { items: rows.slice(0, limit).map(toView), hasMore: rows.length > limit }
}
