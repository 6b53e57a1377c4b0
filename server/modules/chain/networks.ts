import { sha256 } from '@noble/hashes/sha2.js'
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils.js'
import { base58 } from '@scure/base'
import { ApiError } from '../../lib/errors.ts'
import { ASSETS, type AssetInfo } from '../../lib/assets.ts'
import type { Network } from './addresses.ts'

/**
 * How the simulator paces each network. Tron produces a block every 3 s; Sui certifies a
 * checkpoint about every 0.5 s. An arrival or withdrawal is final once the network's confirmation
 * count (from the asset catalog: Sui 1, Tron 19) of blocks or checkpoints has passed on the
 * organization's clock: Sui after 0.5 s, Tron after 57 s.
 */
export const NETWORK_PACE: Readonly<Record<Network, { blockIntervalMs: number; unit: 'checkpoint' | 'block' }>> = {
  sui: { blockIntervalMs: 500, unit: 'checkpoint' },
  tron: { blockIntervalMs: 3000, unit: 'block' },
}

/** The asset a network carries (one per network in the catalog). */
export function assetOfNetwork(network: Network): AssetInfo {
  const info = ASSETS.find((asset) => asset.network === network)
  if (!info) throw new ApiError('unsupported_asset', `No supported asset on ${network}`, { field: 'network' })
  return info
}

export function confirmationsRequired(network: Network): number {
  return assetOfNetwork(network).confirmations
}

/** The block (Tron) or checkpoint (Sui) number at a time: the simulator's chain height follows the clock. */
export function blockAt(network: Network, timeMs: number): bigint {
  return BigInt(Math.floor(timeMs / NETWORK_PACE[network].blockIntervalMs))
}

/** When something included at `timeMs` has the network's confirmation count behind it. */
export function finalityAt(network: Network, timeMs: number): number {
  return timeMs + confirmationsRequired(network) * NETWORK_PACE[network].blockIntervalMs
}

const TRON_TX_HASH = /^[0-9a-f]{64}$/
const BASE58 = /^[1-9A-HJ-NP-Za-km-z]+$/

/**
 * A transaction hash in its network's own form: Tron transaction ids are 64 lowercase hex digits;
 * Sui transaction digests are the base58 form of 32 bytes. Anything else is `invalid_request`.
 */
export function parseTxHash(network: Network, value: string, field = 'txHash'): string {
  if (network === 'tron') {
    const lower = value.toLowerCase()
    if (!TRON_TX_HASH.test(lower)) throw new ApiError('invalid_request', 'A Tron transaction id is 64 hex digits', { field })
    return lower
  }
  let bytes: Uint8Array | undefined
  if (value.length >= 32 && value.length <= 44 && BASE58.test(value)) {
    try {
      bytes = base58.decode(value)
    } catch {
      bytes = undefined
    }
  }
  if (!bytes || bytes.length !== 32 || base58.encode(bytes) !== value) {
    throw new ApiError('invalid_request', 'A Sui transaction digest is the base58 form of 32 bytes', { field })
  }
  return value
}

/** A deterministic transaction hash in the network's form, from a label (the simulator's transactions). */
export function simulatedTxHash(network: Network, label: string): string {
  const digest = sha256(utf8ToBytes(`kassa-sandbox-chain/${label}`))
  return network === 'tron' ? bytesToHex(digest) : base58.encode(digest)
}
