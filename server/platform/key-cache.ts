import type { ServiceEnvironment } from '../config.ts'
import { sha256Hex } from '../lib/hash.ts'

export type KeyType = 'secret' | 'publishable' | 'test'

/** Requests a minute per key (secret and test keys, unless the organization's limit says otherwise). */
export const DEFAULT_KEY_RATE_LIMIT = 1000
/** Requests a minute per publishable key: it is shipped to browsers, so it gets less. */
export const PUBLISHABLE_KEY_RATE_LIMIT = 100
/** Requests a minute per source address without a key (or with a key that fails). */
export const ANONYMOUS_RATE_LIMIT = 30

export interface CachedKey {
  id: string
  orgId: string
  type: KeyType
  environment: ServiceEnvironment
  keyHash: string
  expiresAtMs: number | null
  revoked: boolean
}

export interface CachedOrg {
  id: string
  rateLimitPerMinute: number | null
  /** The row's `limits_version`: raised by one with every change of the limit. */
  limitsVersion: number
}

export type KeyLookup =
  | { ok: true; key: CachedKey }
  | { ok: false; reason: 'unknown' | 'revoked' | 'expired' | 'wrong_environment' }

export const KEY_PREFIXES: Record<KeyType, string> = {
  secret: 'svc_secret_',
  publishable: 'svc_pub_',
  test: 'svc_test_',
}

const KEY_SHAPE = /^svc_(secret|pub|test)_[1-9A-HJ-NP-Za-km-z]{20,64}$/

/** A key missing here and in the database is not read again for this long. */
export const ABSENT_KEY_MS = 10_000
/** At most this many absent keys are remembered; past it the oldest are forgotten. */
const ABSENT_KEYS_MAX = 10_000

/** Reads a key (and its organization) by hash from the database, for a key missing from memory. */
export type KeyLoader = (keyHash: string) => Promise<{ key: CachedKey; org: CachedOrg | undefined } | undefined>

/**
 * The request path does not touch the database to authenticate a known key: every key lives here,
 * keyed by its hash. The cache is exact about revocation and expiry because revocation updates it
 * before the operator's call returns (and other instances hear of it by NOTIFY), and expiry is
 * compared with the clock on every lookup. A key issued on another instance whose notice has not
 * arrived yet is read from the database on its first use (`lookupReadingMisses`).
 */
export class KeyCache {
  private readonly byHash = new Map<string, CachedKey>()
  private readonly byId = new Map<string, CachedKey>()
  private readonly orgs = new Map<string, CachedOrg>()
  /** Keys read from the database and found missing there too, until when (wall-clock ms); oldest first. */
  private readonly absent = new Map<string, number>()
  private readonly loading = new Map<string, Promise<void>>()

  constructor(
    private readonly environment: ServiceEnvironment,
    private readonly loader?: KeyLoader,
  ) {}

  static isWellFormed(presented: string): boolean {
    return KEY_SHAPE.test(presented)
  }

  lookup(presented: string, nowMs: number): KeyLookup {
    if (!KeyCache.isWellFormed(presented)) return { ok: false, reason: 'unknown' }
    const key = this.byHash.get(sha256Hex(presented))
    if (key === undefined) return { ok: false, reason: 'unknown' }
    if (key.revoked) return { ok: false, reason: 'revoked' }
    if (key.expiresAtMs !== null && nowMs >= key.expiresAtMs) return { ok: false, reason: 'expired' }
    if (key.environment !== this.environment) return { ok: false, reason: 'wrong_environment' }
    return { ok: true, key }
  }

  /**
   * `lookup`, but a well-formed key missing from memory is read from the database once (a key just
   * issued on another instance, whose notice has not arrived yet). A key missing there too is not
   * read again for `ABSENT_KEY_MS`; concurrent misses of one key share one read. Callers count
   * the request against its source's limit first, so misses cost at most that many reads.
   */
  async lookupReadingMisses(presented: string, nowMs: number): Promise<KeyLookup> {
    const found = this.lookup(presented, nowMs)
    if (found.ok || found.reason !== 'unknown' || this.loader === undefined || !KeyCache.isWellFormed(presented)) return found
    const keyHash = sha256Hex(presented)
    const absentUntil = this.absent.get(keyHash)
    if (absentUntil !== undefined && absentUntil > nowMs) return found
    let load = this.loading.get(keyHash)
    if (load === undefined) {
      load = this.readMissing(keyHash, nowMs).finally(() => this.loading.delete(keyHash))
      this.loading.set(keyHash, load)
    }
    await load
    return this.lookup(presented, nowMs)
  }

  private async readMissing(keyHash: string, nowMs: number): Promise<void> {
    const read = await this.loader!(keyHash)
    if (read === undefined) {
      this.absent.delete(keyHash)
      if (this.absent.size >= ABSENT_KEYS_MAX) this.absent.delete(this.absent.keys().next().value!)
      this.absent.set(keyHash, nowMs + ABSENT_KEY_MS)
      return
    }
    if (read.org !== undefined) this.upsertOrg(read.org)
    this.upsertKey(read.key)
  }

  /**
   * A key's revocation and its rotation expiry are each set once and never undone, so a row read
   * before one of them committed (a NOTIFY's refresh answering after the change was taken here)
   * keeps them: a revoked key never works again on this instance.
   */
  upsertKey(key: CachedKey): void {
    const previous = this.byId.get(key.id)
    const merged = previous === undefined ? key : { ...key, revoked: previous.revoked || key.revoked, expiresAtMs: previous.expiresAtMs ?? key.expiresAtMs }
    if (previous !== undefined) this.byHash.delete(previous.keyHash)
    this.byId.set(merged.id, merged)
    this.byHash.set(merged.keyHash, merged)
  }

  /**
   * Keeps the newest of the rows read: a refresh that read the row before a later change committed,
   * answering after that change was taken here, leaves the later limit in place. (Limits go up and
   * down, so unlike a revocation no value tells old from new; the row's version does.)
   */
  upsertOrg(org: CachedOrg): void {
    const previous = this.orgs.get(org.id)
    if (previous !== undefined && previous.limitsVersion > org.limitsVersion) return
    this.orgs.set(org.id, org)
  }

  org(orgId: string): CachedOrg | undefined {
    return this.orgs.get(orgId)
  }
}
