import { describe, expect, test } from 'bun:test'
import fc from 'fast-check'
import { assertZeroSum, deltasOf, type BalanceDelta } from '../../server/ledger/hot-balances.ts'
import { planDepositSettlement, planRedeemSettlement, planRollback } from '../../server/modules/earning/plan.ts'
import type { IntentWithAccount } from '../../server/modules/earning/repo.ts'
import { PRICE_ONE, remainderIndexOf, sharesFor, splitByWeight, valueOf } from '../../server/modules/vaults/prices.ts'

const price = fc.bigInt({ min: PRICE_ONE / 100n, max: PRICE_ONE * 100n })
const amount = fc.bigInt({ min: 1n, max: 10n ** 15n })

function intent(index: number, accountIndex: number, fields: Partial<IntentWithAccount>): IntentWithAccount {
  return {
    id: `txi_${index.toString().padStart(32, '0')}`,
    orgId: accountIndex % 2 === 0 ? 'org_a' : 'org_b',
    accountId: `acct_${accountIndex}`,
    externalId: `ext_${accountIndex}`,
    vaultId: 'v',
    kind: 'deposit',
    mode: 'cycle',
    cycleId: 'vcy_1',
    recordId: `rec_${index}`,
    state: 'confirmed',
    reason: null,
    amount: null,
    fee: 0n,
    shares: null,
    payout: null,
    claimedAt: null,
    quoteId: null,
    createdAt: new Date(0),
    settledAt: null,
    ...fields,
  }
}

const context = { vaultId: 'v', asset: 'USDC', cycleId: 'vcy_1', at: new Date(0), movementKind: 'test', events: () => [] }

/** What the plan's movements do to each balance, summed over its operations. */
function deltas(plan: ReturnType<typeof planRollback>): Map<string, BalanceDelta> {
  const into = new Map<string, BalanceDelta>()
  for (const op of plan.ops) {
    assertZeroSum(op.postings)
    deltasOf(op.orgId, op.postings, 1n, into)
  }
  return into
}

const deposits = fc.array(fc.record({ account: fc.integer({ min: 0, max: 5 }), amount, fee: fc.bigInt({ min: 0n, max: 10n ** 6n }) }), { minLength: 1, maxLength: 30 })
const redemptions = fc.array(fc.record({ account: fc.integer({ min: 0, max: 5 }), shares: amount }), { minLength: 1, maxLength: 30 })

describe('money rules', () => {
  test('minted shares are worth at most what was paid in, short of exact by less than one share unit per intent', () => {
    fc.assert(
      fc.property(amount, price, (paid, cyclePrice) => {
        const shares = sharesFor(paid, cyclePrice)
        expect(shares * cyclePrice <= paid * PRICE_ONE).toBe(true)
        expect(paid * PRICE_ONE < (shares + 1n) * cyclePrice).toBe(true)
        expect(valueOf(shares, cyclePrice) <= paid).toBe(true)
      }),
    )
  })

  test('redemption proceeds never exceed the shares\' value, short of it by less than one minor unit', () => {
    fc.assert(
      fc.property(amount, price, (shares, cyclePrice) => {
        const proceeds = valueOf(shares, cyclePrice)
        expect(proceeds * PRICE_ONE <= shares * cyclePrice).toBe(true)
        expect(shares * cyclePrice < (proceeds + 1n) * PRICE_ONE).toBe(true)
      }),
    )
  })

  test('split parts always sum to walletTotal, each short of its exact share by less than one unit but the remainder\'s', () => {
    fc.assert(
      fc.property(amount, fc.array(amount, { minLength: 1, maxLength: 20 }), (total, weights) => {
        const remainderIndex = remainderIndexOf(weights)
        const parts = splitByWeight(total, weights, remainderIndex)
        expect(parts.reduce((sum, part) => sum + part, 0n)).toBe(total)
        const weightSum = weights.reduce((sum, weight) => sum + weight, 0n)
        parts.forEach((part, index) => {
          if (index === remainderIndex) return
          expect(part * weightSum <= total * weights[index]!).toBe(true)
          expect(total * weights[index]! < (part + 1n) * weightSum).toBe(true)
        })
      }),
    )
  })

  test('a deposit settlement mints exactly the shares of its intents and moves exactly their amounts, all movements balanced', () => {
    fc.assert(
      fc.property(deposits, price, (rows, cyclePrice) => {
        const intents = rows.map((row, index) => intent(index, row.account, { amount: row.amount, fee: row.fee }))
        const plan = planDepositSettlement(intents, cyclePrice, context)
        const paid = rows.reduce((sum, row) => sum + row.amount, 0n)
        expect(plan.totalAmount).toBe(paid)
        expect(plan.totalShares).toBe(rows.reduce((sum, row) => sum + sharesFor(row.amount, cyclePrice), 0n))
        expect(valueOf(plan.totalShares, cyclePrice) <= paid).toBe(true)
        const moved = deltas(plan)
        for (const row of intents) expect(plan.results.get(row.id)!.shares).toBe(sharesFor(row.amount!, cyclePrice))
        let inFlightOut = 0n
        for (const delta of moved.values()) if (delta.kind === 'customer' && delta.asset === 'USDC') inFlightOut -= delta.inFlight
        expect(inFlightOut).toBe(paid)
      }),
    )
  })

  test('a rollback returns exactly what each account paid, fees included, and unlocks exactly the locked shares', () => {
    fc.assert(
      fc.property(deposits, redemptions, (depositRows, redeemRows) => {
        const depositIntents = depositRows.map((row, index) => intent(index, row.account, { amount: row.amount, fee: row.fee }))
        const depositDeltas = deltas(planRollback(depositIntents, 'deposit', context))
        const paidBy = new Map<string, bigint>()
        for (const row of depositIntents) paidBy.set(row.accountId, (paidBy.get(row.accountId) ?? 0n) + row.amount! + row.fee)
        for (const delta of depositDeltas.values()) {
          if (delta.kind !== 'customer') continue
          expect(delta.available).toBe(paidBy.get(delta.accountId)!)
        }
        const redeemIntents = redeemRows.map((row, index) => intent(index, row.account, { kind: 'redeem', shares: row.shares }))
        const lockedBy = new Map<string, bigint>()
        for (const row of redeemIntents) lockedBy.set(row.accountId, (lockedBy.get(row.accountId) ?? 0n) + row.shares!)
        for (const delta of deltas(planRollback(redeemIntents, 'redeem', context)).values()) {
          expect(delta.available).toBe(lockedBy.get(delta.accountId)!)
          expect(delta.held).toBe(-lockedBy.get(delta.accountId)!)
        }
      }),
    )
  })

  test('a redeem settlement pays each account the value of its locked shares once, and each intent\'s parts sum to it', () => {
    fc.assert(
      fc.property(redemptions, price, (rows, cyclePrice) => {
        const intents = rows.map((row, index) => intent(index, row.account, { kind: 'redeem', shares: row.shares }))
        const plan = planRedeemSettlement(intents, cyclePrice, 'direct', context)
        const moved = deltas(plan)
        const lockedBy = new Map<string, bigint>()
        for (const row of intents) lockedBy.set(row.accountId, (lockedBy.get(row.accountId) ?? 0n) + row.shares!)
        for (const [accountId, locked] of lockedBy) {
          const walletTotal = valueOf(locked, cyclePrice)
          const paid = [...moved.values()].find((delta) => delta.accountId === accountId && delta.asset === 'USDC')?.available ?? 0n
          expect(paid).toBe(walletTotal)
          const parts = intents.filter((row) => row.accountId === accountId).map((row) => plan.results.get(row.id)!)
          expect(parts.reduce((sum, result) => sum + result.amount, 0n)).toBe(walletTotal)
          expect(parts.every((result) => result.walletTotal === walletTotal)).toBe(true)
        }
      }),
    )
  })
})
