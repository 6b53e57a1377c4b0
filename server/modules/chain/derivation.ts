import { ed25519 } from '@noble/curves/ed25519.js'
import { secp256k1 } from '@noble/curves/secp256k1.js'
import { blake2b } from '@noble/hashes/blake2.js'
import { hmac } from '@noble/hashes/hmac.js'
import { keccak_256 } from '@noble/hashes/sha3.js'
import { sha512 } from '@noble/hashes/sha2.js'
import { bytesToHex, concatBytes, utf8ToBytes } from '@noble/hashes/utils.js'
import { assert } from '../../lib/assert.ts'
import { parseAddress, tronBase58check, TRON_VERSION_BYTE, type Network } from './addresses.ts'

/** Sui's signature-scheme flag of Ed25519, hashed in front of the public key. */
const SUI_ED25519_FLAG = 0x00

/** Sui address of an Ed25519 public key: `0x` + hex(blake2b-256(0x00 || public key)). */
export function suiAddressOfPublicKey(publicKey: Uint8Array): string {
  assert(publicKey.length === 32, 'an Ed25519 public key is 32 bytes')
  return `0x${bytesToHex(blake2b(concatBytes(new Uint8Array([SUI_ED25519_FLAG]), publicKey), { dkLen: 32 }))}`
}

/** Tron address of a secp256k1 public key: base58check(0x41 || last 20 bytes of keccak-256(x || y)). */
export function tronAddressOfPublicKey(uncompressedPublicKey: Uint8Array): string {
  assert(uncompressedPublicKey.length === 65 && uncompressedPublicKey[0] === 0x04, 'an uncompressed secp256k1 public key is 0x04 || x || y')
  const hash = keccak_256(uncompressedPublicKey.subarray(1))
  return tronBase58check.encode(concatBytes(new Uint8Array([TRON_VERSION_BYTE]), hash.subarray(12)))
}

/** The address of a private key on a network (Sui: Ed25519 seed; Tron: secp256k1 secret key). */
export function addressOfPrivateKey(network: Network, privateKey: Uint8Array): string {
  if (network === 'sui') return suiAddressOfPublicKey(ed25519.getPublicKey(privateKey))
  return tronAddressOfPublicKey(secp256k1.getPublicKey(privateKey, false))
}

/** What a deposit address is derived for. The index starts at 0 and grows when an address is retired and replaced. */
export interface DerivationPath {
  orgId: string
  accountId: string
  asset: string
  network: Network
  index: number
}

/**
 * Deterministic key derivation from the configured seed: HMAC-SHA512(seed, label) and the first 32
 * bytes are the private key. For secp256k1 a key outside [1, n-1] (probability about 2^-128) is
 * re-derived with a counter, so every label has exactly one key.
 */
function derivePrivateKey(seed: Uint8Array, network: Network, label: string): Uint8Array {
  for (let attempt = 0; attempt < 16; attempt++) {
    const key = hmac(sha512, seed, utf8ToBytes(attempt === 0 ? label : `${label}#${attempt}`)).slice(0, 32)
    if (network === 'sui' || secp256k1.utils.isValidSecretKey(key)) return key
  }
  throw new Error('no valid secp256k1 key in 16 attempts: the hash function is broken')
}

function depositLabel(path: DerivationPath): string {
  assert(Number.isSafeInteger(path.index) && path.index >= 0, 'a derivation index is a whole number')
  return `kassa/deposit/v1/${path.orgId}/${path.accountId}/${path.asset}/${path.network}/${path.index}`
}

/**
 * Derives deposit addresses (and the organization's sending wallet) from one seed. The private
 * keys are never stored: the same seed and path always give the same key, so a signer holding
 * the seed can sweep any deposit address the service ever handed out.
 */
export class AddressDeriver {
  constructor(private readonly seed: Uint8Array) {
    assert(seed.length >= 32, 'the deposit key seed is at least 32 bytes')
  }

  depositAddress(path: DerivationPath): string {
    const address = addressOfPrivateKey(path.network, derivePrivateKey(this.seed, path.network, depositLabel(path)))
    // A derived address that the strict parser would refuse is a bug, never something to hand out.
    assert(parseAddress(path.network, address) === address, `derived ${path.network} address ${address} is not canonical`)
    return address
  }

  /** The organization's hot wallet on a network: the sender of its withdrawals. */
  hotWalletAddress(orgId: string, network: Network): string {
    return addressOfPrivateKey(network, derivePrivateKey(this.seed, network, `kassa/hot-wallet/v1/${orgId}/${network}`))
  }
}
