import { ed25519 } from '@noble/curves/ed25519.js'
import { secp256k1 } from '@noble/curves/secp256k1.js'
import { blake2b } from '@noble/hashes/blake2.js'
import { sha256 } from '@noble/hashes/sha2.js'
import { keccak_256 } from '@noble/hashes/sha3.js'
import { bytesToHex, concatBytes, hexToBytes, utf8ToBytes } from '@noble/hashes/utils.js'
import { base58, base64 } from '@scure/base'
import { INTENT_TRANSACTION, signSui, suiAddressOfEd25519, verifySuiSignature } from './sui.ts'

export type Rail = 'sui' | 'evm'

/** Gas the sponsor pays at most for one mint, in the chain's smallest unit. */
export const MINT_GAS_BUDGET = '10000000'
/** How long a built mint may wait for the user's signature before it can no longer execute. */
export const MINT_LIFETIME_MS = 10 * 60 * 1000

/** The transaction a claim answers: the bytes to sign, their digest, and the sponsor's signature. */
export interface SponsoredTransaction {
  rail: Rail
  /** Base64 of the transaction bytes (the sandbox chain's canonical JSON encoding, UTF-8). */
  txBytes: string
  digest: string
  sender: string
  sponsor: string
  sponsorSignature: string
  gasBudget: string
  expiresAt: string
}

export interface MintPayload {
  version: 1
  kind: 'sbt_mint'
  chain: 'sui-sandbox' | 'evm-sandbox'
  sender: string
  sponsor: string
  sbtId: number
  gasBudget: string
  expiresAtMs: number
  nonce: string
}

/** The EVM address of a secp256k1 public key: the last 20 bytes of keccak-256 of the uncompressed key. */
export function evmAddressOf(publicKey: Uint8Array): string {
  const uncompressed = secp256k1.Point.fromBytes(publicKey).toBytes(false)
  return `0x${bytesToHex(keccak_256(uncompressed.subarray(1)).subarray(12))}`
}

/**
 * The sandbox chain's fee sponsor and transaction format. Each rail's transaction is built for
 * real: canonical bytes, a digest, and the sponsor's signature made with the sandbox sponsor key
 * (Ed25519 over Sui's transaction intent for Sui; secp256k1 over keccak-256 for EVM), so the
 * frontend's flow (sign the bytes, submit both signatures) is the one it runs against a real chain.
 */
export class SandboxMintChain {
  private readonly suiKey: Uint8Array
  private readonly evmKey: Uint8Array
  readonly suiSponsor: string
  readonly evmSponsor: string

  constructor(seedHex: string) {
    this.suiKey = sha256(concatBytes(utf8ToBytes('kassa sbt sponsor sui'), hexToBytes(seedHex)))
    this.evmKey = sha256(concatBytes(utf8ToBytes('kassa sbt sponsor evm'), hexToBytes(seedHex)))
    this.suiSponsor = suiAddressOfEd25519(ed25519.getPublicKey(this.suiKey))
    this.evmSponsor = evmAddressOf(secp256k1.getPublicKey(this.evmKey))
  }

  build(rail: Rail, sender: string, sbtId: number, nowMs: number, nonce: string): SponsoredTransaction {
    const payload: MintPayload = {
      version: 1,
      kind: 'sbt_mint',
      chain: rail === 'sui' ? 'sui-sandbox' : 'evm-sandbox',
      sender,
      sponsor: rail === 'sui' ? this.suiSponsor : this.evmSponsor,
      sbtId,
      gasBudget: MINT_GAS_BUDGET,
      expiresAtMs: nowMs + MINT_LIFETIME_MS,
      nonce,
    }
    const bytes = utf8ToBytes(JSON.stringify(payload))
    const digest = transactionDigest(rail, bytes)
    const sponsorSignature =
      rail === 'sui' ? signSui(this.suiKey, INTENT_TRANSACTION, bytes) : `0x${bytesToHex(secp256k1.sign(keccak_256(bytes), this.evmKey, { prehash: false, format: 'recovered' }))}`
    return { rail, txBytes: base64.encode(bytes), digest, sender, sponsor: payload.sponsor, sponsorSignature, gasBudget: MINT_GAS_BUDGET, expiresAt: new Date(payload.expiresAtMs).toISOString() }
  }

  /** Checks both signatures of a transaction as the chain would before executing it. */
  signaturesValid(rail: Rail, txBytes: Uint8Array, sender: string, userSignature: string, sponsorSignature: string): boolean {
    if (rail === 'sui') {
      return verifySuiSignature(userSignature, INTENT_TRANSACTION, txBytes, sender) && verifySuiSignature(sponsorSignature, INTENT_TRANSACTION, txBytes, this.suiSponsor)
    }
    const hash = keccak_256(txBytes)
    return recoverEvm(userSignature, hash) === sender.toLowerCase() && recoverEvm(sponsorSignature, hash) === this.evmSponsor
  }
}

export function transactionDigest(rail: Rail, bytes: Uint8Array): string {
  return rail === 'sui' ? base58.encode(blake2b(concatBytes(utf8ToBytes('TransactionData::'), bytes), { dkLen: 32 })) : `0x${bytesToHex(keccak_256(bytes))}`
}

/** The address that made a 65-byte recoverable secp256k1 signature (hex) over a hash, or undefined. */
export function recoverEvm(signatureHex: string, hash: Uint8Array): string | undefined {
  try {
    const signature = hexToBytes(signatureHex.replace(/^0x/, ''))
    return evmAddressOf(secp256k1.recoverPublicKey(signature, hash, { prehash: false }))
  } catch {
    return undefined
  }
}
