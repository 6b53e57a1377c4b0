import { ApiError } from '../../lib/errors.ts'
import { isValidAddress, NETWORKS, parseAddress, type Network } from '../chain/addresses.ts'

/** What is screened: a destination on a network, on behalf of an organization's account. */
export interface ScreeningSubject {
  orgId: string
  accountId: string
  network: Network
  /** Canonical form (see `parseAddress`). */
  address: string
}

export type ScreeningVerdict = { outcome: 'pass' } | { outcome: 'reject'; reason: string }

/**
 * One screening check. A real screening partner (a sanctions or risk API) plugs in by implementing
 * this; it is called outside any database transaction. Throwing means "could not decide": the
 * service then fails closed with `partner_unavailable`, it never lets an unscreened address through.
 */
export interface ScreeningRule {
  readonly name: string
  check(subject: ScreeningSubject): Promise<ScreeningVerdict>
}

/**
 * The rule shipped: a configured list of blocked addresses (`SCREENING_BLOCKLIST`). Entries are
 * compared in canonical form, so a Sui address blocked in upper case is blocked in lower case too.
 */
export class BlocklistRule implements ScreeningRule {
  readonly name = 'blocklist'
  private readonly blocked = new Set<string>()

  constructor(addresses: readonly string[]) {
    for (const address of addresses) this.blocked.add(canonicalBlocklistEntry(address))
  }

  async check(subject: ScreeningSubject): Promise<ScreeningVerdict> {
    if (this.blocked.has(subject.address)) return { outcome: 'reject', reason: 'The address is on the blocked-address list' }
    return { outcome: 'pass' }
  }
}

/** A blocklist entry in canonical form; it must be a valid address of one of the networks. */
export function canonicalBlocklistEntry(address: string): string {
  const network = NETWORKS.find((candidate) => isValidAddress(candidate, address))
  if (network === undefined) throw new Error(`"${address.slice(0, 80)}" is not a valid Sui or Tron address`)
  return parseAddress(network, address)
}

/** Every rule must pass; the first rejection answers `screening_rejected` with its reason. */
export class Screening {
  constructor(private readonly rules: readonly ScreeningRule[]) {}

  async screen(subject: ScreeningSubject, field: string): Promise<void> {
    for (const rule of this.rules) {
      let verdict: ScreeningVerdict
      try {
        verdict = await rule.check(subject)
      } catch (error) {
        console.error(`screening: rule ${rule.name} could not decide; refusing (fail closed)`, error)
        throw new ApiError('partner_unavailable', 'Screening could not be completed; try again later', { field })
      }
      if (verdict.outcome === 'reject') throw new ApiError('screening_rejected', `Screening rejected this destination: ${verdict.reason}`, { field })
    }
  }
}
