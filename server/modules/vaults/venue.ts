import { eq } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { sandboxVenueNavs } from '../../../db/schema/index.ts'
import { ApiError } from '../../lib/errors.ts'
import { grownNav, sandboxDigest } from './prices.ts'

/** What a cycle hands the venue when it settles: the totals that move between the platform and the venue. */
export interface VenueSettlement {
  cycleId: string
  vaultId: string
  kind: 'deposit' | 'redeem'
  totalAmount: bigint
  totalShares: bigint
}

/**
 * Where vault money is invested. The API does not change with the venue: the sandbox venue below
 * simulates one, and a production adapter implements the same interface.
 */
export interface VaultVenue {
  readonly kind: 'sandbox' | 'production'
  /** Starts tracking a new vault at its initial price. */
  register(vaultId: string, price: bigint, dailyRatePpb: bigint, at: Date): Promise<void>
  /** The vault's NAV per share (fixed point, see prices.ts) at `at`. */
  price(vaultId: string, at: Date): Promise<bigint>
  /** Sets the NAV from `at` on (operators, sandbox), and optionally its daily growth. */
  setNav(vaultId: string, price: bigint, at: Date, dailyRatePpb?: bigint): Promise<void>
  /** Hands a cycle's totals to the venue; answers the transaction digest. Safe to repeat for one cycle. */
  settle(settlement: VenueSettlement): Promise<{ digest: string }>
}

/** The sandbox venue: NAV per vault in Postgres, grown once per whole day on the vaults' clock. */
export class SandboxVenue implements VaultVenue {
  readonly kind = 'sandbox' as const

  constructor(private readonly db: Database) {}

  async register(vaultId: string, price: bigint, dailyRatePpb: bigint, at: Date): Promise<void> {
    await this.db.insert(sandboxVenueNavs).values({ vaultId, nav: price, navAt: at, dailyRatePpb }).onConflictDoNothing()
  }

  async price(vaultId: string, at: Date): Promise<bigint> {
    const [row] = await this.db.select().from(sandboxVenueNavs).where(eq(sandboxVenueNavs.vaultId, vaultId))
    if (!row) throw new ApiError('partner_unavailable', `The venue does not know vault ${vaultId}`)
    return grownNav(row.nav, row.navAt.getTime(), at.getTime(), row.dailyRatePpb)
  }

  async setNav(vaultId: string, price: bigint, at: Date, dailyRatePpb?: bigint): Promise<void> {
    const set = dailyRatePpb === undefined ? { nav: price, navAt: at } : { nav: price, navAt: at, dailyRatePpb }
    await this.db.update(sandboxVenueNavs).set(set).where(eq(sandboxVenueNavs.vaultId, vaultId))
  }

  async settle(settlement: VenueSettlement): Promise<{ digest: string }> {
    return { digest: sandboxDigest('venue-settlement', settlement.cycleId) }
  }
}
