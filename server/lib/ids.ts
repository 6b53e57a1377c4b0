/**
 * Identifiers carry their kind as a prefix and a UUIDv7 underneath (hex, no dashes), so they sort by
 * creation time: cursors and logs order naturally.
 */
export type IdKind =
  | 'org'
  | 'key'
  | 'acct'
  | 'atk'
  | 'evt'
  | 'wh'
  | 'txi'
  | 'hold'
  | 'tr'
  | 'pay'
  | 'qt'
  | 'wd'
  | 'alw'
  | 'dep'
  | 'arr'
  | 'addr'
  | 'req'
  | 'pst'
  | 'mv'
  | 'stmt'
  | 'sbtk'
  | 'opa'
  | 'rec'
  | 'vcy'

export function newId<K extends IdKind>(kind: K): `${K}_${string}` {
  // The UUID's 16 bytes spelled in hex in one native step: a flat string, where taking the dashes
  // out of the text form builds a rope that every later use (a map key, JSON, a query) flattens.
  return `${kind}_${Bun.randomUUIDv7('buffer').toString('hex')}`
}

const ID_BODY = /^[0-9a-f]{32}$/

/** True when `value` is an identifier of the given kind in our format. */
export function isId(kind: IdKind, value: string): boolean {
  const prefix = `${kind}_`
  return value.startsWith(prefix) && ID_BODY.test(value.slice(prefix.length))
}

/**
 * The 32-bit word spelled by the 8 lowercase hex digits of `text` from `from` (a quarter of an
 * identifier's UUID), or -1 if they are not such digits. Memory that keeps many identifiers (pending
 * holds, the slow authorizations' log) keeps them as four such words rather than as strings.
 */
export function hexWord(text: string, from: number): number {
  let value = 0
  for (let digit = from; digit < from + 8; digit++) {
    const code = text.charCodeAt(digit)
    const nibble = code >= 48 && code <= 57 ? code - 48 : code >= 97 && code <= 102 ? code - 87 : -1
    if (nibble < 0) return -1
    value = value * 16 + nibble
  }
  return value
}
