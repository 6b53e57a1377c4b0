import { ApiError } from '../lib/errors.ts'

/**
 * What every request's text must be before any route sees it, checked once here for every route
 * (the body plugin and the authorization in front of the app call it): nothing Postgres cannot
 * store (a NUL character, a lone UTF-16 surrogate, bytes that are not UTF-8), no object key that
 * reaches an object's prototype, and no nesting deeper than `MAX_BODY_DEPTH`. The depth and the
 * escapes are found by one linear scan of the text before it is parsed, so a hostile body costs
 * no more than reading it; the parsed value is walked (to name the field) only when the text
 * holds a `\u` escape or a forbidden key's name.
 */

/** Arrays and objects nested deeper than this are refused before parsing (no request needs more than a few levels). */
export const MAX_BODY_DEPTH = 32

/** Object keys refused at every depth of every body: they reach or replace an object's prototype. */
export const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype'])
const FORBIDDEN_KEY_TEXT = /"(?:__proto__|constructor|prototype)"/

const QUOTE = 0x22
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d
const LETTER_U = 0x75

/** What the scan of a body's text found. */
interface Scan {
  /** A `\u` escape inside a string (a NUL, a surrogate or a key's letters may hide in one): the parsed value must be walked. */
  unicodeEscape: boolean
}

/**
 * One pass over a body's text: refuses nesting deeper than `MAX_BODY_DEPTH` (brackets inside
 * strings do not count), and notes whether any string holds a `\u` escape. The text is not
 * checked for being JSON: the parser does that afterwards.
 */
export function scanJsonText(text: string): Scan {
  let depth = 0
  let unicodeEscape = false
  const length = text.length
  // A string's inside is skipped with native searches (the next quote, the next backslash) rather
  // than read a character at a time: most of a large body is inside strings.
  let nextBackslash = text.indexOf('\\')
  for (let index = 0; index < length; index++) {
    const code = text.charCodeAt(index)
    if (code === QUOTE) {
      let from = index + 1
      for (;;) {
        const quote = text.indexOf('"', from)
        if (quote === -1) return { unicodeEscape }
        if (nextBackslash !== -1 && nextBackslash < from) nextBackslash = text.indexOf('\\', from)
        if (nextBackslash === -1 || nextBackslash > quote) {
          index = quote
          break
        }
        if (text.charCodeAt(nextBackslash + 1) === LETTER_U) unicodeEscape = true
        from = nextBackslash + 2
        nextBackslash = text.indexOf('\\', from)
      }
    } else if (code === OPEN_BRACKET || code === OPEN_BRACE) {
      depth += 1
      if (depth > MAX_BODY_DEPTH) {
        throw new ApiError('invalid_request', `The request body is nested deeper than ${MAX_BODY_DEPTH} levels`, { field: 'body' })
      }
    } else if (code === CLOSE_BRACKET || code === CLOSE_BRACE) depth -= 1
  }
  return { unicodeEscape }
}

/** Whether a string holds something Postgres refuses in text and jsonb: a NUL, or a surrogate without its pair. */
export function unstorable(text: string): boolean {
  return text.includes('\u0000') || !text.isWellFormed()
}

function pathOf(parent: string, key: string | number): string {
  return parent === '' ? String(key) : `${parent}.${key}`
}

const UNSTORABLE_MESSAGE = 'contains a NUL character or an unpaired UTF-16 surrogate, which cannot be stored'

/** Walks a parsed body (depth already bounded) and refuses the first unstorable string or forbidden key, naming its field. */
function checkValue(value: unknown, path: string): void {
  if (typeof value === 'string') {
    if (unstorable(value)) throw new ApiError('invalid_request', `${path || 'body'} ${UNSTORABLE_MESSAGE}`, { field: path || 'body' })
    return
  }
  if (value === null || typeof value !== 'object') return
  if (Array.isArray(value)) {
    for (let index = 0; index < value.length; index++) checkValue(value[index], pathOf(path, index))
    return
  }
  for (const key of Object.keys(value)) {
    const field = pathOf(path, key)
    if (FORBIDDEN_KEYS.has(key)) throw new ApiError('invalid_request', `Field name '${key}' is not allowed`, { field })
    if (unstorable(key)) throw new ApiError('invalid_request', `A field name in ${path || 'body'} ${UNSTORABLE_MESSAGE}`, { field: path || 'body' })
    checkValue((value as Record<string, unknown>)[key], field)
  }
}

const utf8 = new TextDecoder('utf-8', { ignoreBOM: true, fatal: true })

/** Bytes as UTF-8 text, refused (400 naming the body) when they are not UTF-8. */
export function decodeUtf8(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes)
  } catch {
    throw new ApiError('invalid_request', 'The request body is not valid UTF-8', { field: 'body' })
  }
}

/**
 * A body's text parsed as JSON once the scan allows it; the parsed value is walked only when the
 * text holds a `\u` escape or a forbidden key's name. Throws `ApiError` for every refusal; a text
 * that is not JSON throws the parser's `SyntaxError`.
 */
export function parseCheckedJson(text: string): unknown {
  const { unicodeEscape } = scanJsonText(text)
  const value: unknown = JSON.parse(text)
  if (unicodeEscape || FORBIDDEN_KEY_TEXT.test(text)) checkValue(value, '')
  return value
}

/** `Idempotency-Key`: 1 to 255 visible ASCII characters. */
const IDEMPOTENCY_KEY_SHAPE = /^[\x21-\x7e]{1,255}$/

/** Refuses a request whose Idempotency-Key header is present and malformed (400 naming the header), on every route alike. */
export function checkIdempotencyKeyHeader(request: Request): void {
  const key = request.headers.get('idempotency-key')
  if (key === null || IDEMPOTENCY_KEY_SHAPE.test(key)) return
  throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 printable ASCII characters', { field: 'Idempotency-Key' })
}

/**
 * The URL's path and query, decoded as a router would: a path holding a NUL, a surrogate or a
 * percent escape that is not UTF-8 names no resource (404); such a query parameter is refused
 * (400 naming it). Only URLs with a percent escape are decoded (`%` is how such characters arrive).
 */
export function checkUrl(url: string): void {
  if (!url.includes('%')) return
  const schemeEnd = url.indexOf('://')
  const pathStart = url.indexOf('/', schemeEnd === -1 ? 0 : schemeEnd + 3)
  if (pathStart === -1) return
  const queryStart = url.indexOf('?', pathStart)
  const hashStart = url.indexOf('#', pathStart)
  const pathEnd = queryStart !== -1 ? queryStart : hashStart !== -1 ? hashStart : url.length
  if (!decodesCleanly(url.slice(pathStart, pathEnd))) throw new ApiError('not_found', 'No such resource')
  if (queryStart === -1) return
  const query = url.slice(queryStart + 1, hashStart !== -1 && hashStart > queryStart ? hashStart : url.length)
  for (const pair of query.split('&')) {
    const equals = pair.indexOf('=')
    const name = equals === -1 ? pair : pair.slice(0, equals)
    const value = equals === -1 ? '' : pair.slice(equals + 1)
    const decodedName = decodeOrUndefined(name.replaceAll('+', ' '))
    if (decodedName === undefined || unstorable(decodedName)) throw new ApiError('invalid_request', 'A query parameter name cannot be decoded or stored', { field: 'query' })
    if (!decodesCleanly(value.replaceAll('+', ' '))) {
      throw new ApiError('invalid_request', `Query parameter '${decodedName}' ${UNSTORABLE_MESSAGE} (or is not UTF-8)`, { field: decodedName })
    }
  }
}

function decodeOrUndefined(text: string): string | undefined {
  try {
    return decodeURIComponent(text)
  } catch {
    return undefined
  }
}

function decodesCleanly(text: string): boolean {
  const decoded = decodeOrUndefined(text)
  return decoded !== undefined && !unstorable(decoded)
}
