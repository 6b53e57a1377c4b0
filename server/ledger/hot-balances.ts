import { assert } from '../lib/assert.ts'

export type Bucket = 'available' | 'held' | 'in_flight'
export type LedgerAccountKind = 'customer' | 'system'

/**
 * The organization's own ledger accounts. Money enters through the faucet (sandbox) or chain
 * clearing (deposits), so those two run negative by design; fees, suspense and card settlement only ever receive.
 */
export const SYSTEM_ACCOUNTS = {
  faucet: 'system:faucet',
  chainClearing: 'system:chain_clearing',
  fees: 'system:fees',
  suspense: 'system:suspense',
  /** Receives captured card payments until the card network settles them with the organization. */
  cardSettlement: 'system:card_settlement',
} as const

const MAY_GO_NEGATIVE: ReadonlySet<string> = new Set([SYSTEM_ACCOUNTS.faucet, SYSTEM_ACCOUNTS.chainClearing])

/**
 * Counterparty accounts stand for the world outside the organization's ledger (an investment
 * venue's custody, the issuer of a vault's shares): value enters and leaves through them, so, like
 * the faucet and chain clearing, they run negative by design. A module names its own below this prefix.
 */
export const COUNTERPARTY_PREFIX = 'system:counterparty:'

/** One leg of a movement. System accounts have a single bucket, `available`. */
export interface Posting {
  accountId: string
  kind: LedgerAccountKind
  bucket: Bucket
  asset: string
  amountMinor: bigint
}

/** Per balance row, the change a set of postings makes. */
export interface BalanceDelta {
  orgId: string
  accountId: string
  asset: string
  kind: LedgerAccountKind
  available: bigint
  held: bigint
  inFlight: bigint
}

/** A balance as memory holds it: its buckets and the total the invariant ties them to. */
export interface HotBalance extends BalanceDelta {
  total: bigint
}

export function balanceKey(orgId: string, accountId: string, asset: string): string {
  return `${orgId}\u0000${accountId}\u0000${asset}`
}

/**
 * Sums postings per balance row, keyed by `balanceKey`; `sign` -1n gives the deltas that undo them.
 * Consecutive postings on the same row (a reservation's two buckets) share one key.
 */
export function deltasOf(orgId: string, postings: readonly Posting[], sign: bigint, into = new Map<string, BalanceDelta>()): Map<string, BalanceDelta> {
  let delta: BalanceDelta | undefined
  for (const posting of postings) {
    if (delta === undefined || delta.accountId !== posting.accountId || delta.asset !== posting.asset) {
      const key = balanceKey(orgId, posting.accountId, posting.asset)
      delta = into.get(key)
      if (delta === undefined) {
        delta = { orgId, accountId: posting.accountId, asset: posting.asset, kind: posting.kind, available: 0n, held: 0n, inFlight: 0n }
        into.set(key, delta)
      }
    }
    const amount = sign === 1n ? posting.amountMinor : posting.amountMinor * sign
    if (posting.bucket === 'available') delta.available += amount
    else if (posting.bucket === 'held') delta.held += amount
    else delta.inFlight += amount
  }
  return into
}

/** Adds an operation's deltas (as reserved, one per balance) into a running sum per balance. */
export function addDeltas(into: Map<string, BalanceDelta>, deltas: ReadonlyMap<string, BalanceDelta>): void {
  for (const [key, delta] of deltas) {
    const sum = into.get(key)
    if (sum === undefined) into.set(key, { ...delta })
    else {
      sum.available += delta.available
      sum.held += delta.held
      sum.inFlight += delta.inFlight
    }
  }
}

/** Double entry: the legs of one movement cancel out in every asset. */
export function assertZeroSum(postings: readonly Posting[]): void {
  // Nearly every movement is in one asset: its sum is kept apart, other assets in a map.
  assert(postings.length >= 2, 'a movement has at least two legs')
  const firstAsset = postings[0]?.asset
  let firstSum = 0n
  let otherSums: Map<string, bigint> | undefined
  for (const posting of postings) {
    assert(posting.amountMinor !== 0n, 'a posting of zero is noise in the ledger')
    assert(posting.kind === 'customer' || posting.bucket === 'available', 'system accounts have only the available bucket')
    if (posting.asset === firstAsset) firstSum += posting.amountMinor
    else {
      otherSums ??= new Map()
      otherSums.set(posting.asset, (otherSums.get(posting.asset) ?? 0n) + posting.amountMinor)
    }
  }
  if (firstSum !== 0n) assert(false, `postings of ${firstAsset} sum to ${firstSum}, not zero`)
  if (otherSums) for (const [asset, sum] of otherSums) if (sum !== 0n) assert(false, `postings of ${asset} sum to ${sum}, not zero`)
}

function mayGoNegative(delta: BalanceDelta): boolean {
  return delta.kind === 'system' && (MAY_GO_NEGATIVE.has(delta.accountId) || delta.accountId.startsWith(COUNTERPARTY_PREFIX))
}

/** Only the fields a hot balance keeps (a database row carries more, such as `updatedAt`). */
function copyOf(row: HotBalance): HotBalance {
  const { orgId, accountId, asset, kind, available, held, inFlight, total } = row
  return { orgId, accountId, asset, kind, available, held, inFlight, total }
}

/** Where a set of postings would take a balance below zero, if anywhere. */
export interface Overdraft {
  accountId: string
  asset: string
  bucket: Bucket
}

/**
 * The hot balances: every balance row of the database plus the effect of operations not yet
 * committed. JavaScript runs one callback at a time, so a check followed by `apply` in the same
 * synchronous step is atomic: the next request sees the reservation.
 */
export class HotBalances {
  private readonly rows = new Map<string, HotBalance>()

  get(orgId: string, accountId: string, asset: string): HotBalance | undefined {
    return this.rows.get(balanceKey(orgId, accountId, asset))
  }

  getByKey(key: string): HotBalance | undefined {
    return this.rows.get(key)
  }

  /** Replaces a row with what the database holds (reconciliation). */
  load(row: HotBalance): void {
    this.rows.set(balanceKey(row.orgId, row.accountId, row.asset), copyOf(row))
  }

  /** Takes the database's row unless memory already has one (a first touch racing operations). */
  loadIfAbsent(row: HotBalance): void {
    const key = balanceKey(row.orgId, row.accountId, row.asset)
    if (!this.rows.has(key)) this.rows.set(key, copyOf(row))
  }

  findOverdraft(orgId: string, postings: readonly Posting[]): Overdraft | undefined {
    return this.overdraftIn(deltasOf(orgId, postings, 1n))
  }

  /** `findOverdraft` for deltas already summed by `deltasOf` (keyed by `balanceKey`). */
  overdraftIn(deltas: ReadonlyMap<string, BalanceDelta>): Overdraft | undefined {
    for (const [key, delta] of deltas) {
      if (mayGoNegative(delta)) continue
      const row = this.rows.get(key)
      if ((row?.available ?? 0n) + delta.available < 0n) return { accountId: delta.accountId, asset: delta.asset, bucket: 'available' }
      if ((row?.held ?? 0n) + delta.held < 0n) return { accountId: delta.accountId, asset: delta.asset, bucket: 'held' }
      if ((row?.inFlight ?? 0n) + delta.inFlight < 0n) return { accountId: delta.accountId, asset: delta.asset, bucket: 'in_flight' }
    }
    return undefined
  }

  apply(deltas: Iterable<BalanceDelta>): void {
    for (const delta of deltas) this.applyOne(balanceKey(delta.orgId, delta.accountId, delta.asset), delta)
  }

  /** `apply` for deltas summed by `deltasOf`, whose keys are already the rows' keys. */
  applyKeyed(deltas: ReadonlyMap<string, BalanceDelta>): void {
    for (const [key, delta] of deltas) this.applyOne(key, delta)
  }

  private applyOne(key: string, delta: BalanceDelta): void {
    let row = this.rows.get(key)
    if (row === undefined) {
      row = { orgId: delta.orgId, accountId: delta.accountId, asset: delta.asset, kind: delta.kind, available: 0n, held: 0n, inFlight: 0n, total: 0n }
      this.rows.set(key, row)
    }
    row.available += delta.available
    row.held += delta.held
    row.inFlight += delta.inFlight
    row.total += delta.available + delta.held + delta.inFlight
    assert(row.total === row.available + row.held + row.inFlight, 'hot balance lost its invariant')
  }

  /** Forgets the organizations' rows (`Ledger.forgetOrganizations`). */
  forgetOrganizations(orgIds: ReadonlySet<string>): void {
    for (const [key, row] of this.rows) if (orgIds.has(row.orgId)) this.rows.delete(key)
  }

  /** Forgets every row (`Ledger.load`, which rebuilds memory as at a restart). */
  clear(): void {
    this.rows.clear()
  }

  size(): number {
    return this.rows.size
  }
}
