import { ed25519 } from '@noble/curves/ed25519.js'
import { blake2b } from '@noble/hashes/blake2.js'
import { bytesToHex, concatBytes } from '@noble/hashes/utils.js'
import { base64 } from '@scure/base'
import { SbtError } from './envelope.ts'

/** Sui's signature scheme flag for Ed25519, first byte of a serialized signature and of the address preimage. */
const ED25519_FLAG = 0x00
const ED25519_SERIALIZED_LENGTH = 1 + 64 + 32

/** Sui intent scopes: what a signature is over (a transaction, or a personal message). */
export const INTENT_TRANSACTION = 0
export const INTENT_PERSONAL_MESSAGE = 3

const SUI_ADDRESS = /^(?:0x)?([0-9a-fA-F]{64})$/

/**
 * A Sui wallet address, strictly: 64 hex digits, with or without `0x`, in either case. Normalized
 * to `0x` and lower case. Short forms (`0x2`) name system objects, never a wallet, and are refused.
 */
export function normalizeSuiAddress(raw: string | undefined | null): string {
  if (raw === undefined || raw === null || raw === '') throw new SbtError('invalid_address', 'address is required: a Sui address, 0x followed by 64 hex digits')
  const match = SUI_ADDRESS.exec(raw.trim() === raw ? raw : '')
  if (!match) throw new SbtError('invalid_address', 'address must be a Sui address: 0x followed by 64 hex digits')
  return `0x${match[1]!.toLowerCase()}`
}

/** The Sui address of an Ed25519 public key: BLAKE2b-256 of the flag byte and the key. */
export function suiAddressOfEd25519(publicKey: Uint8Array): string {
  return `0x${bytesToHex(blake2b(concatBytes(new Uint8Array([ED25519_FLAG]), publicKey), { dkLen: 32 }))}`
}

function uleb128(value: number): Uint8Array {
  const out: number[] = []
  let rest = value
  do {
    let byte = rest & 0x7f
    rest >>>= 7
    if (rest !== 0) byte |= 0x80
    out.push(byte)
  } while (rest !== 0)
  return new Uint8Array(out)
}

/**
 * What a Sui wallet signs: BLAKE2b-256 of the intent (scope, version 0, app id 0) followed by the
 * payload. A personal message's payload is its BCS encoding (a length-prefixed byte vector); a
 * transaction's is its bytes as they are.
 */
export function intentDigest(scope: number, payload: Uint8Array): Uint8Array {
  const body = scope === INTENT_PERSONAL_MESSAGE ? concatBytes(uleb128(payload.length), payload) : payload
  return blake2b(concatBytes(new Uint8Array([scope, 0, 0]), body), { dkLen: 32 })
}

/** A serialized Sui signature (base64 of flag, signature, public key) made with an Ed25519 secret key. */
export function signSui(secretKey: Uint8Array, scope: number, payload: Uint8Array): string {
  const signature = ed25519.sign(intentDigest(scope, payload), secretKey)
  return base64.encode(concatBytes(new Uint8Array([ED25519_FLAG]), signature, ed25519.getPublicKey(secretKey)))
}

/**
 * Checks a serialized Sui signature over a payload for an address: Ed25519 only (the scheme of
 * the wallets the frontend supports); the key must hash to the address, and the signature verify.
 */
export function verifySuiSignature(serialized: string, scope: number, payload: Uint8Array, address: string): boolean {
  let bytes: Uint8Array
  try {
    bytes = base64.decode(serialized)
  } catch {
    return false
  }
  if (bytes.length !== ED25519_SERIALIZED_LENGTH || bytes[0] !== ED25519_FLAG) return false
  const signature = bytes.subarray(1, 65)
  const publicKey = bytes.subarray(65)
  if (suiAddressOfEd25519(publicKey) !== address) return false
  try {
    return ed25519.verify(signature, intentDigest(scope, payload), publicKey)
  } catch {
    return false
  }
}
