/**
 * Business dates and their cut-offs, in an organization's IANA time zone, without Temporal: the
 * zone's UTC offset at an instant comes from `Intl.DateTimeFormat`, and a local wall time is turned
 * into an instant the way Temporal's `compatible` disambiguation does (a wall time skipped by a
 * daylight-saving jump means the instant the jump lands on; a wall time that happens twice means the
 * earlier one).
 *
 * Business date D ends at the cut-off: `cutoffHour`:00 local time on D, or, for hour 0 (the
 * default), midnight at the end of D. A movement booked at or after the cut-off belongs to D + 1.
 * A period therefore lasts 23, 24 or 25 hours around a daylight-saving change.
 */

const MS_PER_DAY = 86_400_000
const MS_PER_HOUR = 3_600_000

export interface BusinessDay {
  timeZone: string
  /** 0 to 23; 0 is midnight at the end of the date. */
  cutoffHour: number
}

export const DEFAULT_BUSINESS_DAY: BusinessDay = { timeZone: 'UTC', cutoffHour: 0 }

const formatters = new Map<string, Intl.DateTimeFormat>()

function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone)
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    })
    formatters.set(timeZone, formatter)
  }
  return formatter
}

/** True for a time zone this runtime knows (IANA names such as `Europe/Berlin`, and `UTC`). */
export function isTimeZone(name: string): boolean {
  if (name.length === 0 || name.length > 64) return false
  try {
    formatterOf(name)
    return true
  } catch {
    return false
  }
}

/** The zone's canonical spelling as the runtime reports it (`europe/berlin` becomes `Europe/Berlin`). */
export function canonicalTimeZone(name: string): string {
  return formatterOf(name).resolvedOptions().timeZone
}

/** The local wall time at `instantMs`, as the milliseconds a UTC clock would show for it. */
function localWallMs(instantMs: number, timeZone: string): number {
  const parts: Record<string, number> = {}
  for (const part of formatterOf(timeZone).formatToParts(new Date(instantMs))) {
    if (part.type !== 'literal') parts[part.type] = Number(part.value)
  }
  const seconds = Math.floor(instantMs / 1000) * 1000
  const wall = Date.UTC(parts.year!, parts.month! - 1, parts.day!, parts.hour!, parts.minute!, parts.second!)
  return wall + (instantMs - seconds)
}

/** The zone's offset from UTC at an instant, in milliseconds (positive east of Greenwich). */
export function offsetAtMs(instantMs: number, timeZone: string): number {
  const whole = Math.floor(instantMs / 1000) * 1000
  return localWallMs(whole, timeZone) - whole
}

/**
 * The instant at which the zone's clocks show `wallMs` (a wall time written as UTC milliseconds).
 * Offsets are read a day either side: no zone changes its offset twice within two days.
 */
export function instantOfWallMs(wallMs: number, timeZone: string): number {
  const before = offsetAtMs(wallMs - MS_PER_DAY, timeZone)
  const after = offsetAtMs(wallMs + MS_PER_DAY, timeZone)
  const candidates = [wallMs - before, wallMs - after].filter((instant) => localWallMs(instant, timeZone) === wallMs)
  if (candidates.length > 0) return Math.min(...candidates)
  // Skipped by a jump forward: the wall time is read with the offset before the jump, which lands
  // on the instant just as far past the jump as the wall time was past its start.
  return wallMs - before
}

/** `YYYY-MM-DD` of a date held as UTC midnight milliseconds. */
export function dateText(dayMs: number): string {
  return new Date(dayMs).toISOString().slice(0, 10)
}

/** UTC midnight milliseconds of a `YYYY-MM-DD` date; NaN when it is not a real date. */
export function parseDate(text: string): number {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) return Number.NaN
  const ms = Date.parse(`${text}T00:00:00Z`)
  return Number.isNaN(ms) || dateText(ms) !== text ? Number.NaN : ms
}

export function addDays(date: string, days: number): string {
  return dateText(parseDate(date) + days * MS_PER_DAY)
}

/** The instant business date `date` ends: its cut-off. */
export function cutoffOf(date: string, day: BusinessDay): number {
  const dayMs = parseDate(date)
  const wall = day.cutoffHour === 0 ? dayMs + MS_PER_DAY : dayMs + day.cutoffHour * MS_PER_HOUR
  return instantOfWallMs(wall, day.timeZone)
}

/** The business date an instant belongs to: the date whose cut-off is the first one after it. */
export function businessDateOf(instantMs: number, day: BusinessDay): string {
  const localDate = dateText(Math.floor(localWallMs(instantMs, day.timeZone) / MS_PER_DAY) * MS_PER_DAY)
  // The local calendar date, or the next one once its cut-off has passed (never more than one).
  let date = addDays(localDate, -1)
  while (cutoffOf(date, day) <= instantMs) date = addDays(date, 1)
  return date
}
