import { ApiError } from './errors.ts'

export type AssetCode = 'USDC' | 'USDT'
export type Network = 'sui' | 'tron'

export interface AssetInfo {
  /** The identifier used everywhere an asset is named: `USDC`, `USDT`. */
  asset: AssetCode
  network: Network
  decimals: number
  name: string
  /** Confirmations after which an arrival on this network is final. */
  confirmations: number
}

/** The two rails the service supports. Each asset lives on exactly one network. */
export const ASSETS: readonly AssetInfo[] = [
  { asset: 'USDC', network: 'sui', decimals: 6, name: 'USD Coin on Sui', confirmations: 1 },
  { asset: 'USDT', network: 'tron', decimals: 6, name: 'Tether USD on Tron', confirmations: 19 },
]

const BY_CODE = new Map<string, AssetInfo>(ASSETS.map((info) => [info.asset, info]))

export function findAsset(code: string): AssetInfo | undefined {
  return BY_CODE.get(code)
}

/** The asset named by a request, or `unsupported_asset` naming the field. */
export function requireAsset(code: string, field = 'asset'): AssetInfo {
  const info = BY_CODE.get(code)
  if (!info) {
    throw new ApiError('unsupported_asset', `Unsupported asset "${code.slice(0, 20)}"; supported: ${ASSETS.map((a) => a.asset).join(', ')}`, {
      field,
    })
  }
  return info
}
