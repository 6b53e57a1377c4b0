import type { Database, Executor } from '../../../db/client.ts'
import { ApiError, invalid, notFound } from '../../lib/errors.ts'
import { formatAmount, parseAmount } from '../../lib/money.ts'
import { requireAsset } from '../../lib/assets.ts'
import { appendEvent } from '../events/writer.ts'
import type { VaultClock } from './clock.ts'
import type { CreateVaultInput, UpdateVaultInput, VaultPriceView, VaultView } from './model.ts'
import { apyFrom, APY_WINDOW_DAYS, formatPrice, parsePrice, PRICE_ONE, windowStart } from './prices.ts'
import * as repo from './repo.ts'
import type { VaultVenue } from './venue.ts'

/** A write done in the transaction of an operator's change: the action's audit record and its event. */
export type AlongsideWrite = (tx: Executor) => Promise<void>

/**
 * Records an operator action (given by the app from the operator module): `run` gets the write to do
 * alongside its change; an action that changed nothing or was refused is recorded on its own.
 */
export type AuditOperatorAction = <T>(
  request: { operator: string; action: string; targetId: string; orgId: null; detail: Record<string, unknown> },
  run: (alongside: AlongsideWrite) => Promise<T>,
) => Promise<T>

const DEFAULT_PRICE_MAX_AGE_SECONDS = 2 * 86_400

/** The ledger asset that holds a vault's shares: shares are their own asset per vault. */
export function sharesAsset(vaultId: string): string {
  return `shares:${vaultId}`
}

export function toVaultView(row: repo.VaultRecord): VaultView {
  const decimals = requireAsset(row.asset).decimals
  return {
    vaultId: row.id,
    name: row.name,
    asset: row.asset,
    state: row.state,
    terms: {
      minSubscription: formatAmount(row.minSubscription, decimals),
      minRedemption: formatAmount(row.minRedemption, decimals),
      depositCycleSeconds: row.depositCycleSeconds,
      redeemCycleSeconds: row.redeemCycleSeconds,
      instantRedemptionFeeBps: row.instantFeeBps,
      subscriptionFeeBps: row.subscriptionFeeBps,
      platformFeeBps: row.platformFeeBps,
      payoutMode: row.payoutMode,
      priceMaxAgeSeconds: row.priceMaxAgeSeconds,
    },
    instantBuffer: formatAmount(row.instantBuffer, decimals),
    createdAt: row.createdAt.toISOString(),
  }
}

/** A daily rate as a fraction ("0.00015") in parts per billion. */
function parseDailyRate(text: string, field: string): bigint {
  const match = /^0(?:\.(\d{1,9}))?$/.exec(text)
  if (!match) throw invalid(field, 'A daily rate is a fraction below 1 with at most 9 decimals, for example "0.00015"')
  return BigInt((match[1] ?? '').padEnd(9, '0'))
}

function requirePrice(text: string, field: string): bigint {
  const price = parsePrice(text)
  if (price === undefined) throw invalid(field, 'A price is a positive decimal with at most 18 decimals')
  return price
}

export interface CurrentPrice {
  price: bigint
  at: Date
  stale: boolean
}

export interface VaultCatalogDeps {
  db: Database
  clock: VaultClock
  venue: VaultVenue
}

/** The vault catalog and its prices: operators manage vaults; everyone reads them. */
export class VaultCatalog {
  constructor(private readonly deps: VaultCatalogDeps) {}

  now(): Date {
    return this.deps.clock.now()
  }

  async require(vaultId: string, field?: string): Promise<repo.VaultRecord> {
    const row = await repo.findVault(this.deps.db, vaultId)
    if (!row) throw new ApiError('not_found', `No such vault ${vaultId}`, field ? { field } : {})
    return row
  }

  async list(): Promise<repo.VaultRecord[]> {
    return repo.listVaults(this.deps.db)
  }

  async create(input: CreateVaultInput): Promise<VaultView> {
    const info = requireAsset(input.asset)
    if (await repo.findVault(this.deps.db, input.vaultId)) throw new ApiError('conflict', `Vault ${input.vaultId} exists`, { field: 'vaultId' })
    const now = this.now()
    const price = input.initialPrice === undefined ? PRICE_ONE : requirePrice(input.initialPrice, 'initialPrice')
    const dailyRatePpb = input.dailyRate === undefined ? 0n : parseDailyRate(input.dailyRate, 'dailyRate')
    const row: repo.VaultRecord = {
      id: input.vaultId,
      name: input.name,
      asset: info.asset,
      state: 'active',
      minSubscription: parseAmount(input.minSubscription, info.decimals, 'minSubscription'),
      minRedemption: parseAmount(input.minRedemption, info.decimals, 'minRedemption'),
      depositCycleSeconds: input.depositCycleSeconds ?? null,
      redeemCycleSeconds: input.redeemCycleSeconds ?? null,
      instantFeeBps: input.instantRedemptionFeeBps ?? 0,
      subscriptionFeeBps: input.subscriptionFeeBps ?? 0,
      platformFeeBps: input.platformFeeBps ?? 0,
      payoutMode: input.payoutMode ?? 'direct',
      priceMaxAgeSeconds: input.priceMaxAgeSeconds ?? DEFAULT_PRICE_MAX_AGE_SECONDS,
      instantBuffer: input.instantBuffer === undefined ? 0n : parseAmount(input.instantBuffer, info.decimals, 'instantBuffer', { allowZero: true }),
      initialPrice: price,
      createdAt: now,
      updatedAt: now,
    }
    await this.deps.venue.register(row.id, price, dailyRatePpb, now)
    await this.deps.db.transaction(async (tx) => {
      await repo.insertVault(tx, row)
      await repo.insertPrice(tx, { vaultId: row.id, at: now, price, source: 'operator' })
      await repo.insertCycle(tx, repo.newCycle(row.id, 'deposit', 1, now))
      await repo.insertCycle(tx, repo.newCycle(row.id, 'redeem', 1, now))
    })
    return toVaultView(row)
  }

  async update(vaultId: string, input: UpdateVaultInput): Promise<VaultView> {
    const vault = await this.require(vaultId)
    const decimals = requireAsset(vault.asset).decimals
    const set: Partial<repo.VaultRecord> = { updatedAt: this.now() }
    if (input.name !== undefined) set.name = input.name
    if (input.minSubscription !== undefined) set.minSubscription = parseAmount(input.minSubscription, decimals, 'minSubscription')
    if (input.minRedemption !== undefined) set.minRedemption = parseAmount(input.minRedemption, decimals, 'minRedemption')
    if (input.depositCycleSeconds !== undefined) set.depositCycleSeconds = input.depositCycleSeconds
    if (input.redeemCycleSeconds !== undefined) set.redeemCycleSeconds = input.redeemCycleSeconds
    if (input.instantRedemptionFeeBps !== undefined) set.instantFeeBps = input.instantRedemptionFeeBps
    if (input.subscriptionFeeBps !== undefined) set.subscriptionFeeBps = input.subscriptionFeeBps
    if (input.platformFeeBps !== undefined) set.platformFeeBps = input.platformFeeBps
    if (input.payoutMode !== undefined) set.payoutMode = input.payoutMode
    if (input.priceMaxAgeSeconds !== undefined) set.priceMaxAgeSeconds = input.priceMaxAgeSeconds
    if (input.instantBuffer !== undefined) set.instantBuffer = parseAmount(input.instantBuffer, decimals, 'instantBuffer', { allowZero: true })
    const row = await repo.updateVault(this.deps.db, vaultId, set)
    return toVaultView(row!)
  }

  /** Pause or unpause; a vault already in that state is answered as it is, with no event. */
  async setState(vaultId: string, state: 'active' | 'paused', alongside?: AlongsideWrite): Promise<VaultView> {
    const vault = await this.require(vaultId)
    if (vault.state === state) return toVaultView(vault)
    const now = this.now()
    const row = await this.deps.db.transaction(async (tx) => {
      const updated = await repo.updateVault(tx, vaultId, { state, updatedAt: now })
      await appendEvent(tx, { orgId: null, type: state === 'paused' ? 'vault.paused' : 'vault.unpaused', data: { vaultId }, created: now })
      if (alongside) await alongside(tx)
      return updated!
    })
    return toVaultView(row)
  }

  /** The newest price the venue reported, and whether it is older than the vault allows. */
  async currentPrice(vault: repo.VaultRecord): Promise<CurrentPrice> {
    const row = await repo.latestPrice(this.deps.db, vault.id)
    if (!row) throw new ApiError('stale_price', `Vault ${vault.id} has no price yet`, { field: 'vaultId' })
    return { price: row.price, at: row.at, stale: this.now().getTime() - row.at.getTime() > vault.priceMaxAgeSeconds * 1000 }
  }

  /** The current price, or stale_price naming `vaultId` when it is too old to act on. */
  async freshPrice(vault: repo.VaultRecord): Promise<bigint> {
    const current = await this.currentPrice(vault)
    if (current.stale) {
      throw new ApiError('stale_price', `The price of vault ${vault.id} is from ${current.at.toISOString()}, older than ${vault.priceMaxAgeSeconds} s`, { field: 'vaultId' })
    }
    return current.price
  }

  async priceView(vaultId: string): Promise<VaultPriceView> {
    const vault = await this.require(vaultId)
    const current = await this.currentPrice(vault)
    const since = windowStart(current.at)
    const old = vault.createdAt.getTime() <= since.getTime() ? await repo.latestPrice(this.deps.db, vault.id, since) : undefined
    return {
      vaultId: vault.id,
      asset: vault.asset,
      sharePrice: formatPrice(current.price),
      normalizedPrice: formatPrice((current.price * PRICE_ONE) / vault.initialPrice),
      apy: apyFrom(current.price, old?.price),
      apyWindowDays: APY_WINDOW_DAYS,
      asOf: current.at.toISOString(),
      stale: current.stale,
    }
  }

  /** Operators set the NAV (sandbox venue); the price is recorded and `vault.price.updated` sent. */
  async setNav(vaultId: string, priceText: string, dailyRate: string | undefined): Promise<VaultPriceView> {
    const vault = await this.require(vaultId)
    const price = requirePrice(priceText, 'price')
    const now = this.now()
    await this.deps.venue.setNav(vault.id, price, now, dailyRate === undefined ? undefined : parseDailyRate(dailyRate, 'dailyRate'))
    await this.recordPrice(vault.id, price, now, 'operator')
    return this.priceView(vaultId)
  }

  /**
   * One price sync (the worker's step): asks the venue for each vault's NAV and records it, which
   * keeps the price fresh; `vault.price.updated` goes out only when the NAV changed.
   */
  async syncPrices(): Promise<number> {
    const now = this.now()
    let changed = 0
    for (const vault of await this.list()) {
      const price = await this.deps.venue.price(vault.id, now)
      if (await this.recordPrice(vault.id, price, now, 'sync')) changed += 1
    }
    return changed
  }

  /** Records a price; answers whether it changed from the last one (and so sent `vault.price.updated`). */
  async recordPrice(vaultId: string, price: bigint, at: Date, source: repo.PriceRecord['source']): Promise<boolean> {
    return this.deps.db.transaction(async (tx) => {
      const last = await repo.latestPrice(tx, vaultId)
      await repo.insertPrice(tx, { vaultId, at, price, source })
      if (last?.price === price) return false
      await appendEvent(tx, {
        orgId: null,
        type: 'vault.price.updated',
        data: { vaultId, price: price.toString(), priceDecimals: 18, sharePrice: formatPrice(price), timestampMs: at.getTime() },
        created: at,
      })
      return true
    })
  }

  async assertNotFound(vaultId: string): Promise<void> {
    if (!(await repo.findVault(this.deps.db, vaultId))) throw notFound('vault')
  }
}
