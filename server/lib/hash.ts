import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { base58 } from '@scure/base'

export function sha256Hex(value: string): string {
  return createHash('sha256').update(value).digest('hex')
}

/** Random bytes spelled in base58: no look-alike characters, safe in headers and URLs. */
export function randomToken(byteLength: number): string {
  return base58.encode(randomBytes(byteLength))
}

export function timingSafeEqualStrings(left: string, right: string): boolean {
  const a = Buffer.from(left)
  const b = Buffer.from(right)
  if (a.length !== b.length) return false
  return timingSafeEqual(a, b)
}
