/**
 * The path of a request's URL, exactly what `new URL(url).pathname` answers, without building a URL
 * object on every request. `Request.url` is already a parsed and serialized absolute URL (Bun
 * resolves dot segments and backslashes before a handler sees it), so its path is the text from
 * the first `/` after the authority to the first `?` or `#`. Anything that a parser could still
 * rewrite (a dot, a backslash, a percent escape, anything outside the plain path characters) goes
 * through the full parser instead, so the answer never differs from it.
 */
/** Path characters that the URL parser keeps as they are: no dot segment, backslash or percent escape to resolve. */
const PLAIN_PATH = /^[A-Za-z0-9/_~!$&'()*+,;=:@-]*$/

export function pathnameOf(url: string): string {
  const schemeEnd = url.indexOf('://')
  if (schemeEnd === -1) return new URL(url).pathname
  const authorityStart = schemeEnd + 3
  const start = url.indexOf('/', authorityStart)
  const query = url.indexOf('?', authorityStart)
  const fragment = url.indexOf('#', authorityStart)
  // A query or fragment before the first slash (no path at all) is left to the parser.
  if (start === -1 || (query !== -1 && query < start) || (fragment !== -1 && fragment < start)) return new URL(url).pathname
  let end = url.length
  if (query !== -1) end = query
  if (fragment !== -1 && fragment < end) end = fragment
  const path = url.slice(start, end)
  return PLAIN_PATH.test(path) ? path : new URL(url).pathname
}
