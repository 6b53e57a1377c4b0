import type { LedgerOperation } from '../../ledger/writer.ts'
import type { EventRow } from '../events/write-sets.ts'
import { COUNTERPARTY_PREFIX, SYSTEM_ACCOUNTS, type Posting } from '../../ledger/hot-balances.ts'
import { newId } from '../../lib/ids.ts'
import { feeFor, remainderIndexOf, sharesFor, splitByWeight, valueOf } from '../vaults/prices.ts'
import { sharesAsset } from '../vaults/service.ts'
import type { IntentUpdate, IntentWithAccount } from './repo.ts'

/** The organization's account at the venue, in the vault's asset (value placed in the vault). */
export const venueAccount = (vaultId: string) => `${COUNTERPARTY_PREFIX}venue:${vaultId}`
/** The issuer of the vault's shares: minted shares come from it, burnt shares return to it. */
export const issuerAccount = (vaultId: string) => `${COUNTERPARTY_PREFIX}issuer:${vaultId}`

export const customer = (accountId: string, bucket: Posting['bucket'], asset: string, amountMinor: bigint): Posting => ({ accountId, kind: 'customer', bucket, asset, amountMinor })
export const system = (accountId: string, asset: string, amountMinor: bigint): Posting => ({ accountId, kind: 'system', bucket: 'available', asset, amountMinor })

/** Postings without their zero legs (a movement never carries a zero). */
export function nonZero(postings: Posting[]): Posting[] {
  return postings.filter((posting) => posting.amountMinor !== 0n)
}

/** What a cycle's settlement or rollback does, decided from its intents and one price, before anything is written. */
export interface CyclePlan {
  /** One movement per organization (per ACCOUNTS_PER_MOVEMENT of its accounts), its legs aggregated per account. */
  ops: LedgerOperation[]
  updates: IntentUpdate[]
  /** Per intent, what it got (deposit: shares; redeem: proceeds; rollback: amount back). */
  results: Map<string, IntentResult>
  totalAmount: bigint
  totalShares: bigint
  fee: bigint
}

export interface IntentResult {
  shares: bigint
  amount: bigint
  /** Redemptions: the account's aggregated payout in this cycle. */
  walletTotal?: bigint
}

interface PlanContext {
  vaultId: string
  asset: string
  cycleId: string
  at: Date
  movementKind: string
  /** Events of one intent, from its result. */
  events(intent: IntentWithAccount, result: IntentResult): EventRow[]
}

/**
 * Accounts per movement: a large cycle is written as several movements per organization (one per
 * this many accounts), so the statements that write it, and the work of building each, stay small
 * enough that requests committing beside it keep their pace.
 */
export const ACCOUNTS_PER_MOVEMENT = 1000

/** The intents grouped per organization and account, each organization's accounts cut in chunks of ACCOUNTS_PER_MOVEMENT. */
function byOrgAndAccount(intents: IntentWithAccount[]): Array<[string, Map<string, IntentWithAccount[]>]> {
  const orgs = new Map<string, Map<string, IntentWithAccount[]>>()
  for (const intent of intents) {
    let accounts = orgs.get(intent.orgId)
    if (!accounts) orgs.set(intent.orgId, (accounts = new Map()))
    const list = accounts.get(intent.accountId)
    if (list) list.push(intent)
    else accounts.set(intent.accountId, [intent])
  }
  const chunks: Array<[string, Map<string, IntentWithAccount[]>]> = []
  for (const [orgId, accounts] of orgs) {
    let chunk = new Map<string, IntentWithAccount[]>()
    for (const [accountId, list] of accounts) {
      chunk.set(accountId, list)
      if (chunk.size >= ACCOUNTS_PER_MOVEMENT) {
        chunks.push([orgId, chunk])
        chunk = new Map()
      }
    }
    if (chunk.size > 0) chunks.push([orgId, chunk])
  }
  return chunks
}

function operation(orgId: string, context: PlanContext, postings: Posting[], events: EventRow[]): LedgerOperation | undefined {
  const legs = nonZero(postings)
  if (legs.length === 0 && events.length === 0) return undefined
  return { orgId, movementId: newId('mv'), movementKind: context.movementKind, reference: context.cycleId, createdAt: context.at, postings: legs, events }
}

/**
 * A deposit cycle's settlement at one price: each intent's shares = its amount ÷ price, rounded
 * down. Per account, the amounts leave `inFlight` for the venue and the shares come from the issuer.
 */
export function planDepositSettlement(intents: IntentWithAccount[], price: bigint, context: PlanContext): CyclePlan {
  const shares = sharesAsset(context.vaultId)
  const plan: CyclePlan = { ops: [], updates: [], results: new Map(), totalAmount: 0n, totalShares: 0n, fee: 0n }
  for (const [orgId, accounts] of byOrgAndAccount(intents)) {
    const postings: Posting[] = []
    const events: EventRow[] = []
    let orgAmount = 0n
    let orgShares = 0n
    for (const [accountId, list] of accounts) {
      let amount = 0n
      let minted = 0n
      for (const intent of list) {
        const result = { amount: intent.amount!, shares: sharesFor(intent.amount!, price) }
        plan.results.set(intent.id, result)
        plan.updates.push({ id: intent.id, state: 'settled', reason: null, amount: null, shares: result.shares.toString(), payout: null })
        events.push(...context.events(intent, result))
        amount += result.amount
        minted += result.shares
      }
      postings.push(customer(accountId, 'in_flight', context.asset, -amount), customer(accountId, 'available', shares, minted))
      orgAmount += amount
      orgShares += minted
    }
    postings.push(system(venueAccount(context.vaultId), context.asset, orgAmount), system(issuerAccount(context.vaultId), shares, -orgShares))
    plan.totalAmount += orgAmount
    plan.totalShares += orgShares
    const op = operation(orgId, context, postings, events)
    if (op) plan.ops.push(op)
  }
  return plan
}

/**
 * A redeem cycle's settlement at one price. Per account (the aggregated rule): one payout of
 * walletTotal = value of all its locked shares, rounded down; each intent's `amount` is its part
 * by locked shares, rounded down, the remainder to the intent with the most shares (the earliest
 * on a tie), so the parts sum exactly to walletTotal.
 */
export function planRedeemSettlement(intents: IntentWithAccount[], price: bigint, payout: 'direct' | 'claimable', context: PlanContext): CyclePlan {
  const shares = sharesAsset(context.vaultId)
  const plan: CyclePlan = { ops: [], updates: [], results: new Map(), totalAmount: 0n, totalShares: 0n, fee: 0n }
  for (const [orgId, accounts] of byOrgAndAccount(intents)) {
    const postings: Posting[] = []
    const events: EventRow[] = []
    let orgPaid = 0n
    let orgBurnt = 0n
    for (const [accountId, list] of accounts) {
      const weights = list.map((intent) => intent.shares!)
      const burnt = weights.reduce((sum, weight) => sum + weight, 0n)
      const walletTotal = valueOf(burnt, price)
      const parts = splitByWeight(walletTotal, weights, remainderIndexOf(weights))
      list.forEach((intent, index) => {
        const result = { shares: intent.shares!, amount: parts[index]!, walletTotal }
        plan.results.set(intent.id, result)
        plan.updates.push({ id: intent.id, state: 'settled', reason: null, amount: result.amount.toString(), shares: null, payout })
        events.push(...context.events(intent, result))
      })
      postings.push(customer(accountId, 'held', shares, -burnt), customer(accountId, payout === 'direct' ? 'available' : 'in_flight', context.asset, walletTotal))
      orgPaid += walletTotal
      orgBurnt += burnt
    }
    postings.push(system(issuerAccount(context.vaultId), shares, orgBurnt), system(venueAccount(context.vaultId), context.asset, -orgPaid))
    plan.totalAmount += orgPaid
    plan.totalShares += orgBurnt
    const op = operation(orgId, context, postings, events)
    if (op) plan.ops.push(op)
  }
  return plan
}

/**
 * A cycle's rollback: every intent cancelled with reason `rollback`, and exactly what it took given
 * back: a deposit's whole amount (its fee included) to available, a redemption's shares unlocked.
 */
export function planRollback(intents: IntentWithAccount[], kind: 'deposit' | 'redeem', context: PlanContext): CyclePlan {
  const shares = sharesAsset(context.vaultId)
  const plan: CyclePlan = { ops: [], updates: [], results: new Map(), totalAmount: 0n, totalShares: 0n, fee: 0n }
  for (const [orgId, accounts] of byOrgAndAccount(intents)) {
    const postings: Posting[] = []
    const events: EventRow[] = []
    let orgFees = 0n
    for (const [accountId, list] of accounts) {
      let net = 0n
      let fees = 0n
      let locked = 0n
      for (const intent of list) {
        const result = kind === 'deposit' ? { amount: intent.amount! + intent.fee, shares: 0n } : { amount: 0n, shares: intent.shares! }
        plan.results.set(intent.id, result)
        plan.updates.push({ id: intent.id, state: 'cancelled', reason: 'rollback', amount: null, shares: null, payout: null })
        events.push(...context.events(intent, result))
        if (kind === 'deposit') {
          net += intent.amount!
          fees += intent.fee
        } else locked += intent.shares!
      }
      if (kind === 'deposit') postings.push(customer(accountId, 'in_flight', context.asset, -net), customer(accountId, 'available', context.asset, net + fees))
      else postings.push(customer(accountId, 'held', shares, -locked), customer(accountId, 'available', shares, locked))
      plan.totalAmount += net + fees
      plan.totalShares += locked
      orgFees += fees
    }
    if (orgFees > 0n) postings.push(system(SYSTEM_ACCOUNTS.fees, context.asset, -orgFees))
    const op = operation(orgId, context, postings, events)
    if (op) plan.ops.push(op)
  }
  return plan
}

export { feeFor }
