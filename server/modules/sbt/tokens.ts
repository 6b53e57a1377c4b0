import { desc, eq, isNull, and } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { sbtTokens } from '../../../db/schema/index.ts'
import { randomToken, sha256Hex, timingSafeEqualStrings } from '../../lib/hash.ts'
import { newId } from '../../lib/ids.ts'
import { SbtError } from './envelope.ts'

export type SbtEnvironment = 'staging' | 'production'
export const SBT_ENVIRONMENTS = ['staging', 'production'] as const

/** The SBT environment a Kassa service environment serves: sandbox is staging. */
export function sbtEnvironmentOf(serviceEnv: 'sandbox' | 'production'): SbtEnvironment {
  return serviceEnv === 'production' ? 'production' : 'staging'
}

/** How long a token looked up in the database is trusted before it is looked up again (another instance may have revoked it). */
const CACHE_TTL_MS = 1000
const CACHE_ENTRIES_MAX = 10_000

interface CachedToken {
  tokenHash: string
  environment: SbtEnvironment
  revoked: boolean
  loadedAtMs: number
}

export interface IssuedToken {
  id: string
  token: string
  environment: SbtEnvironment
  label: string
  createdAt: string
}

export interface TokenView {
  id: string
  environment: SbtEnvironment
  label: string
  createdAt: string
  revokedAt: string | null
}

/**
 * Service tokens of the SBT listener. The token names its environment (`sbt_staging_…`,
 * `sbt_production_…`) so a token sent to the wrong deployment is refused with a message saying
 * so; the stored environment, not the prefix, is what decides. Only the SHA-256 is stored.
 */
export class SbtTokens {
  private readonly cache = new Map<string, CachedToken>()

  constructor(
    private readonly db: Database,
    private readonly environment: SbtEnvironment,
    private readonly nowMs: () => number = Date.now,
  ) {}

  async issue(environment: SbtEnvironment, label: string): Promise<IssuedToken> {
    const token = `sbt_${environment}_${randomToken(32)}`
    const [row] = await this.db.insert(sbtTokens).values({ id: newId('sbtk'), tokenHash: sha256Hex(token), environment, label }).returning()
    return { id: row!.id, token, environment, label, createdAt: row!.createdAt.toISOString() }
  }

  async revoke(id: string): Promise<TokenView | undefined> {
    const [row] = await this.db
      .update(sbtTokens)
      .set({ revokedAt: new Date(this.nowMs()) })
      .where(and(eq(sbtTokens.id, id), isNull(sbtTokens.revokedAt)))
      .returning()
    const found = row ?? (await this.db.select().from(sbtTokens).where(eq(sbtTokens.id, id)))[0]
    if (found === undefined) return undefined
    this.cache.delete(found.tokenHash)
    return toView(found)
  }

  async list(): Promise<TokenView[]> {
    const rows = await this.db.select().from(sbtTokens).orderBy(desc(sbtTokens.id)).limit(1000)
    return rows.map(toView)
  }

  /** Checks an `Authorization` header value (the token itself, no scheme word). */
  async authenticate(header: string | null): Promise<void> {
    if (header === null || header.trim() === '') throw new SbtError('missing_token', 'Authorization header required: send "Authorization: <token>"')
    const presented = header.trim()
    const hash = sha256Hex(presented)
    let entry = this.cache.get(hash)
    if (entry === undefined || this.nowMs() - entry.loadedAtMs > CACHE_TTL_MS) {
      const [row] = await this.db.select().from(sbtTokens).where(eq(sbtTokens.tokenHash, hash))
      if (row === undefined) {
        this.cache.delete(hash)
        throw new SbtError('invalid_token', 'Invalid token')
      }
      entry = { tokenHash: row.tokenHash, environment: row.environment, revoked: row.revokedAt !== null, loadedAtMs: this.nowMs() }
      if (this.cache.size >= CACHE_ENTRIES_MAX) this.cache.clear()
      this.cache.set(hash, entry)
    }
    // The lookup was by hash; the stored hash is compared again in constant time all the same, so
    // no path through this check depends on how much of a guess matched.
    if (!timingSafeEqualStrings(entry.tokenHash, hash)) throw new SbtError('invalid_token', 'Invalid token')
    if (entry.revoked) throw new SbtError('invalid_token', 'This token has been revoked')
    if (entry.environment !== this.environment) {
      throw new SbtError('wrong_environment', `This token belongs to ${entry.environment}; this is the ${this.environment} deployment`)
    }
  }
}

function toView(row: typeof sbtTokens.$inferSelect): TokenView {
  return { id: row.id, environment: row.environment, label: row.label, createdAt: row.createdAt.toISOString(), revokedAt: row.revokedAt?.toISOString() ?? null }
}
