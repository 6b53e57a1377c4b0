import { sha256 } from '@noble/hashes/sha2.js'
import { createBase58check } from '@scure/base'
import { ApiError } from '../../lib/errors.ts'
import type { Network } from '../../lib/assets.ts'

export type { Network } from '../../lib/assets.ts'

export const NETWORKS: readonly Network[] = ['sui', 'tron']

/** Base58check (4-byte double-SHA-256 checksum) from maintained libraries, never hand-written. */
export const tronBase58check = createBase58check(sha256)

/** Tron mainnet addresses: 21 bytes (0x41 + 20-byte account hash) plus the 4-byte checksum. */
export const TRON_VERSION_BYTE = 0x41

const SUI_ADDRESS = /^0x[0-9a-fA-F]{64}$/
// The base58 alphabet: no 0, O, I or l.
const BASE58 = /^[1-9A-HJ-NP-Za-km-z]+$/

function refuse(network: Network, field: string, why: string): never {
  throw new ApiError('invalid_request', `Not a valid ${network === 'sui' ? 'Sui' : 'Tron'} address: ${why}`, { field })
}

/**
 * Returns the canonical form of an address (Sui: lowercase `0x` + 64 hex digits; Tron: the base58check
 * string as given, which is already canonical) or throws `invalid_request` naming the field.
 * Sui short forms (`0x2`) are refused: a deposit or withdrawal address must be spelled out in full.
 */
export function parseAddress(network: Network, address: string, field = 'address'): string {
  if (typeof address !== 'string') refuse(network, field, 'expected a string')
  if (network === 'sui') {
    if (!SUI_ADDRESS.test(address)) refuse(network, field, 'expected 0x followed by exactly 64 hex digits')
    return address.toLowerCase()
  }
  if (network === 'tron') {
    if (address.length < 25 || address.length > 40 || !BASE58.test(address)) refuse(network, field, 'expected a base58check string')
    let bytes: Uint8Array
    try {
      bytes = tronBase58check.decode(address)
    } catch {
      refuse(network, field, 'checksum does not match')
    }
    if (bytes.length !== 21) refuse(network, field, 'wrong length')
    if (bytes[0] !== TRON_VERSION_BYTE) refuse(network, field, 'version byte is not 0x41')
    // Re-encoding must give back the same string (refuses any non-canonical spelling).
    if (tronBase58check.encode(bytes) !== address) refuse(network, field, 'not in canonical form')
    return address
  }
  throw new ApiError('invalid_request', `Unknown network "${String(network).slice(0, 20)}"`, { field: 'network' })
}

export function isValidAddress(network: Network, address: string): boolean {
  try {
    parseAddress(network, address)
    return true
  } catch {
    return false
  }
}
