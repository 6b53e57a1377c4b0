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

export function newId<K extends IdKind>(kind: K): `${K}_${string}` {
  // The dashes sit at fixed places (8-4-4-4-12); slicing around them costs half of a replaceAll.
  const uuid = Bun.randomUUIDv7()
  return `${kind}_${uuid.slice(0, 8)}${uuid.slice(9, 13)}${uuid.slice(14, 18)}${uuid.slice(19, 23)}${uuid.slice(24)}`
}

const ID_BODY = /^[0-9a-f]{32}$/

/** True when `value` is an identifier of the given kind in our format. */
export function isId(kind: IdKind, value: string): boolean {
  const prefix = `${kind}_`
  return value.startsWith(prefix) && ID_BODY.test(value.slice(prefix.length))
}
