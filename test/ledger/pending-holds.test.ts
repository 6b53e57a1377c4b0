import { describe, expect, test } from 'bun:test'
import type { PendingHold } from '../../server/ledger/ledger.ts'
import { newPendingHold } from '../../server/ledger/pending-hold.ts'
import { PendingHolds } from '../../server/ledger/pending-holds.ts'

let counter = 0
function hold(orgId: string, expiresAtMs: number): PendingHold {
  counter += 1
  return newPendingHold({ id: `hold_${counter}`, orgId, accountId: 'acct', asset: 'USDC', amountMinor: 1n, expiresAtMs, createdAtMs: 0 })
}

/** The ids of holds (views of one hold are different objects: they are compared by id). */
const ids = (holds: PendingHold[]) => holds.map((entry) => entry.id)

describe('pending holds with an expiry index', () => {
  test('answers exactly the holds due on their own organization clock, oldest first, at most max', () => {
    const holds = new PendingHolds()
    const entries = [hold('a', 300), hold('a', 100), hold('a', 200), hold('b', 50), hold('b', 500), hold('a', 900)]
    for (const entry of entries) holds.set(entry.id, entry)
    // Organization b's clock runs 400 ms ahead of a's.
    const clocks: Record<string, number> = { a: 250, b: 650 }
    const due = holds.due((orgId) => clocks[orgId]!, 100)
    expect(due.map((entry) => entry.expiresAtMs)).toEqual([100, 200, 50, 500])
    expect(holds.due((orgId) => clocks[orgId]!, 2)).toHaveLength(2)
  })

  test('a hold no longer pending is dropped; a closing one is skipped but found again once it is pending again', () => {
    const holds = new PendingHolds()
    const captured = hold('a', 10)
    const closing = hold('a', 20)
    const later = hold('a', 1_000)
    for (const entry of [captured, closing, later]) holds.set(entry.id, entry)
    holds.delete(captured.id)
    closing.closing = true
    expect(holds.due(() => 100, 10)).toEqual([])
    // Its close failed: pending again, and due.
    closing.closing = false
    expect(ids(holds.due(() => 100, 10))).toEqual([closing.id])
    // Still pending (its expiry has not committed yet): due again at the next sweep, once.
    holds.set(closing.id, closing)
    expect(ids(holds.due(() => 100, 10))).toEqual([closing.id])
    holds.delete(closing.id)
    expect(ids(holds.due(() => 5_000, 10))).toEqual([later.id])
  })

  test('a sweep costs what is due, not what is pending', () => {
    const holds = new PendingHolds()
    for (let index = 0; index < 100_000; index++) {
      const entry = hold('a', 1_000_000 + index)
      holds.set(entry.id, entry)
    }
    const soon = hold('a', 10)
    holds.set(soon.id, soon)
    let clockReads = 0
    expect(ids(holds.due(() => (clockReads++, 100), 1000))).toEqual([soon.id])
    expect(clockReads).toBe(1)
  })

  test('holds added out of expiry order, within a bucket and across buckets, come due earliest first and no sooner', () => {
    const holds = new PendingHolds()
    // Expiries spread over several 10 s buckets, added in no order.
    const expiries = [45_000, 3_000, 12_500, 1_000, 44_000, 12_000, 2_000, 30_000, 9_999, 10_000]
    const entries = expiries.map((expiresAtMs) => hold('a', expiresAtMs))
    for (const entry of entries) holds.set(entry.id, entry)
    expect(holds.size).toBe(expiries.length)
    const dueAt = (nowMs: number) => holds.due(() => nowMs, 100).map((entry) => entry.expiresAtMs)
    expect(dueAt(999)).toEqual([])
    expect(dueAt(12_000)).toEqual([1_000, 2_000, 3_000, 9_999, 10_000, 12_000])
    // Answered holds stay due until they are deleted (their expiry committed).
    for (const entry of entries) if (entry.expiresAtMs <= 12_000) holds.delete(entry.id)
    expect(dueAt(44_000)).toEqual([12_500, 30_000, 44_000])
    expect(holds.due(() => 44_000, 2)).toHaveLength(2)
  })

  test('a bucket sheds the holds captured or released at its front, and still answers the rest', () => {
    const holds = new PendingHolds()
    // Five thousand holds expiring within one 10 s bucket; all but the last ten are captured.
    const entries = Array.from({ length: 5_000 }, (_, index) => hold('a', 20_000 + index))
    for (const entry of entries) holds.set(entry.id, entry)
    for (const entry of entries.slice(0, -10)) holds.delete(entry.id)
    expect(holds.size).toBe(10)
    expect(holds.due(() => 24_989, 100)).toEqual([])
    expect(ids(holds.due(() => 24_995, 100))).toEqual(ids(entries.slice(-10, -4)))
    expect(ids(holds.due(() => 30_000, 100))).toEqual(ids(entries.slice(-10)))
  })
})

describe('a pending hold as memory keeps it', () => {
  const fields = { id: 'hold_0199aa00bb11cc22dd33ee44ff556677', orgId: 'org_1', accountId: 'acct_1', asset: 'USDC', expiresAtMs: 86_400_000, createdAtMs: 0 }

  test('gives back its amount as set, within and beyond the integers a number holds exactly', () => {
    for (const amountMinor of [0n, 1n, 1_250_000n, BigInt(Number.MAX_SAFE_INTEGER), BigInt(Number.MAX_SAFE_INTEGER) + 1n, 10n ** 37n, -5n]) {
      const kept = newPendingHold({ ...fields, amountMinor })
      expect(kept.amountMinor).toBe(amountMinor)
      expect(typeof kept.amountMinor).toBe('bigint')
    }
  })

  test('gives back its owner as set: one whose id follows the hold\'s, one that does not, none, and one set later', () => {
    const owned = newPendingHold({ ...fields, amountMinor: 1n, ownerId: 'pay_0199aa00bb11cc22dd33ee44ff556677' })
    expect(owned.ownerId).toBe('pay_0199aa00bb11cc22dd33ee44ff556677')
    // A hold made before payments recorded their own holds has an id of its own.
    const legacy = newPendingHold({ ...fields, amountMinor: 1n, ownerId: 'pay_0199ffffffffffffffffffffffffffff' })
    expect(legacy.ownerId).toBe('pay_0199ffffffffffffffffffffffffffff')
    // Same length and suffix as the hold's but for where the kind ends: not the same id after the kind.
    const shifted = newPendingHold({ ...fields, id: 'hold_ab_cd', amountMinor: 1n, ownerId: 'pay_b_cd' })
    expect(shifted.ownerId).toBe('pay_b_cd')
    const none = newPendingHold({ ...fields, amountMinor: 1n })
    expect(none.ownerId).toBeUndefined()
    none.ownerId = 'pay_0199aa00bb11cc22dd33ee44ff556677'
    expect(none.ownerId).toBe('pay_0199aa00bb11cc22dd33ee44ff556677')
    none.ownerId = undefined
    expect(none.ownerId).toBeUndefined()
  })

  test('starts neither closing nor expiring, and keeps what is set on it', () => {
    const kept = newPendingHold({ ...fields, amountMinor: 7n, ownerId: 'pay_0199aa00bb11cc22dd33ee44ff556677' })
    expect(kept.closing).toBe(false)
    expect(kept.expiring).toBeUndefined()
    expect(kept.ownerDurable).toBeUndefined()
    kept.closing = true
    kept.expiring = true
    kept.ownerDurable = true
    expect([kept.closing, kept.expiring, kept.ownerDurable]).toEqual([true, true, true])
    expect([kept.id, kept.orgId, kept.accountId, kept.asset, kept.expiresAtMs, kept.createdAtMs]).toEqual([fields.id, 'org_1', 'acct_1', 'USDC', 86_400_000, 0])
    const holds = new PendingHolds()
    holds.set(kept.id, kept)
    const view = holds.get(kept.id)!
    expect([view.id, view.orgId, view.accountId, view.asset, view.amountMinor, view.expiresAtMs, view.createdAtMs, view.ownerId]).toEqual([fields.id, 'org_1', 'acct_1', 'USDC', 7n, 86_400_000, 0, 'pay_0199aa00bb11cc22dd33ee44ff556677'])
    expect([view.closing, view.expiring, view.ownerDurable]).toEqual([true, true, true])
  })
})

describe('pending holds kept outside the collector\'s heap', () => {
  const fields = { orgId: 'org_1', accountId: 'acct_1', asset: 'USDC', amountMinor: 5n, expiresAtMs: 86_400_000, createdAtMs: 0 }

  test('every view of a pending hold sees what any of them wrote, until the hold is deleted', () => {
    const holds = new PendingHolds()
    const made = newPendingHold({ ...fields, id: 'hold_0199aa00bb11cc22dd33ee44ff556677', ownerId: 'pay_0199aa00bb11cc22dd33ee44ff556677' })
    holds.set(made.id, made)
    const first = holds.get(made.id)!
    const second = holds.get(made.id)!
    expect(first).not.toBe(second)
    expect([holds.isPending(made), holds.isPending(first), holds.isPending(second)]).toEqual([true, true, true])
    first.closing = true
    made.ownerDurable = true
    expect([made.closing, second.closing, second.ownerDurable, first.ownerDurable]).toEqual([true, true, true, true])
    second.closing = false
    expect([made.closing, first.closing]).toEqual([false, false])
    first.ownerId = 'pay_0199ffffffffffffffffffffffffffff'
    expect([made.ownerId, holds.get(made.id)!.ownerId]).toEqual(['pay_0199ffffffffffffffffffffffffffff', 'pay_0199ffffffffffffffffffffffffffff'])
    // Deleted: every view is detached and keeps its own last values; none is pending.
    first.closing = true
    expect(holds.delete(made.id)).toBe(true)
    expect(holds.get(made.id)).toBeUndefined()
    expect([holds.isPending(made), holds.isPending(first), holds.isPending(second)]).toEqual([false, false, false])
    expect(first.closing).toBe(true)
    // A view written after the delete changes nothing pending, and a new hold in its slot is not its.
    const next = newPendingHold({ ...fields, id: 'hold_0199bb00bb11cc22dd33ee44ff556677' })
    holds.set(next.id, next)
    second.closing = true
    expect(holds.get(next.id)!.closing).toBe(false)
    // Set again (a late commit landed): pending with the values the view kept.
    holds.set(first.id, first)
    expect(holds.isPending(first)).toBe(true)
    expect(holds.get(first.id)!.closing).toBe(true)
    expect(holds.size).toBe(2)
  })

  test('finds each of many holds by id through deletes and growth, ids of any form included', () => {
    const holds = new PendingHolds()
    const made: PendingHold[] = []
    for (let index = 0; index < 20_000; index++) {
      // Ids of our form, sharing their first words as UUIDv7s made in one millisecond do, and a few of another form.
      const id = index % 1000 === 7 ? `hold_other-${index}` : `hold_0199aa00bb11${(index * 2654435761 >>> 0).toString(16).padStart(8, '0')}cc22dd33ee44`
      const entry = newPendingHold({ ...fields, id, amountMinor: BigInt(index) * (index % 2 === 0 ? 1n : 10n ** 30n), expiresAtMs: 1_000 + index })
      holds.set(id, entry)
      made.push(entry)
    }
    for (let index = 0; index < made.length; index += 3) expect(holds.delete(made[index]!.id)).toBe(true)
    for (let index = 0; index < made.length; index++) {
      const found = holds.get(made[index]!.id)
      if (index % 3 === 0) expect(found).toBeUndefined()
      else expect([found?.id, found?.amountMinor, found?.expiresAtMs]).toEqual([made[index]!.id, made[index]!.amountMinor, 1_000 + index])
    }
    expect(holds.size).toBe(made.length - Math.ceil(made.length / 3))
    expect(holds.get('hold_0199aa00bb11ffffffffcc22dd33ee45')).toBeUndefined()
    expect(holds.get('hold_other-999999')).toBeUndefined()
    // Everything left is due once, earliest first.
    const due = holds.due(() => 1_000_000, 100_000)
    expect(due.map((entry) => entry.expiresAtMs)).toEqual(made.map((_, index) => index).filter((index) => index % 3 !== 0).map((index) => 1_000 + index))
    holds.clear()
    expect([holds.size, holds.isPending(due[0]!), holds.get(due[0]!.id)]).toEqual([0, false, undefined])
  })

  test('keeps nothing of its holds in the collector\'s heap', async () => {
    const { heapStats } = await import('bun:jsc')
    const holds = new PendingHolds()
    const settled = () => {
      Bun.gc(true)
      return heapStats().objectCount
    }
    const add = (from: number, count: number) => {
      for (let index = from; index < from + count; index++) {
        const suffix = index.toString(16).padStart(32, '0')
        holds.set(`hold_${suffix}`, newPendingHold({ ...fields, id: `hold_${suffix}`, ownerId: `pay_${suffix}`, ownerDurable: true }))
      }
    }
    // Grown once to its size first, so the arrays' own growth is not counted.
    add(0, 50_000)
    for (let index = 0; index < 50_000; index++) holds.delete(`hold_${index.toString(16).padStart(32, '0')}`)
    const before = settled()
    add(100_000, 50_000)
    const after = settled()
    expect(holds.size).toBe(50_000)
    // A few objects of the expiry index's own (its buckets), none per hold.
    expect(after - before).toBeLessThan(500)
  })
})

describe('an identifier read as four 32-bit words (hexWord)', () => {
  test('reads lowercase hex digits, all of them, and refuses anything else', async () => {
    const { hexWord, newId } = await import('../../server/lib/ids.ts')
    expect([hexWord('ffffffff', 0), hexWord('00000000', 0), hexWord('x0199aa00b', 1), hexWord('hold_0000000a', 5)]).toEqual([0xffffffff, 0, 0x0199aa00, 10])
    for (const wrong of ['0199AA00', '0199aa0g', '0199aa0', '0199-a00']) expect(hexWord(wrong, 0)).toBe(-1)
    const id = newId('pay')
    const words = [0, 1, 2, 3].map((word) => hexWord(id, 4 + word * 8))
    expect(`pay_${words.map((word) => word.toString(16).padStart(8, '0')).join('')}`).toBe(id)
  })
})

describe('pending holds against a plain model, in random order', () => {
  test('every get, size, flag and due answer matches a map of plain holds through 20,000 random steps', () => {
    // A seeded generator, so a failure replays.
    let seed = 0x2f6b1d
    const random = () => {
      seed = (Math.imul(seed ^ (seed >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
      return seed / 2 ** 32
    }
    const holds = new PendingHolds()
    interface Plain {
      id: string
      orgId: string
      expiresAtMs: number
      amountMinor: bigint
      closing: boolean
      ownerDurable: boolean
    }
    const model = new Map<string, Plain>()
    const views: PendingHold[] = []
    const ids = Array.from({ length: 600 }, (_, index) => (index % 50 === 0 ? `hold_legacy-${index}` : `hold_${(index * 0x9e3779b1 >>> 0).toString(16).padStart(8, '0')}0199aa00bb11cc22dd33ee44`))
    for (let step = 0; step < 20_000; step++) {
      const id = ids[Math.floor(random() * ids.length)]!
      const action = random()
      if (action < 0.35) {
        const plain: Plain = { id, orgId: random() < 0.5 ? 'org_a' : 'org_b', expiresAtMs: Math.floor(random() * 100_000), amountMinor: random() < 0.1 ? 10n ** 25n : BigInt(Math.floor(random() * 1e9)), closing: false, ownerDurable: random() < 0.5 }
        const made = newPendingHold({ id, orgId: plain.orgId, accountId: 'acct_1', asset: 'USDC', amountMinor: plain.amountMinor, expiresAtMs: plain.expiresAtMs, createdAtMs: 0, ownerDurable: plain.ownerDurable || undefined })
        holds.set(id, made)
        model.set(id, plain)
        views.push(made)
      } else if (action < 0.55) {
        expect(holds.delete(id)).toBe(model.delete(id))
      } else if (action < 0.8) {
        // A flag written through a view, fresh or kept from earlier; written to the model only if
        // that view still shows a pending hold.
        const view = random() < 0.5 ? holds.get(id) : views[Math.floor(random() * views.length)]
        if (view === undefined) continue
        const closing = random() < 0.5
        const pending = holds.isPending(view)
        view.closing = closing
        if (pending) model.get(view.id)!.closing = closing
        else expect(view.closing).toBe(closing)
      } else if (action < 0.95) {
        const found = holds.get(id)
        const plain = model.get(id)
        expect(found === undefined).toBe(plain === undefined)
        if (found && plain) {
          expect([found.orgId, found.expiresAtMs, found.amountMinor, found.closing, found.ownerDurable === true]).toEqual([plain.orgId, plain.expiresAtMs, plain.amountMinor, plain.closing, plain.ownerDurable])
          expect(holds.isPending(found)).toBe(true)
        }
      } else {
        const nowMs = Math.floor(random() * 100_000)
        const due = holds.due(() => nowMs, 10_000)
        const expected = [...model.values()].filter((plain) => plain.expiresAtMs <= nowMs && !plain.closing)
        expect(new Set(due.map((hold) => hold.id))).toEqual(new Set(expected.map((plain) => plain.id)))
        expect(due.length).toBe(expected.length)
      }
      expect(holds.size).toBe(model.size)
    }
  })
})

describe('pending holds at the id table\'s fullest', () => {
  test('every hold is found through deletes and re-adds with the table half full', () => {
    const fields = { orgId: 'org_1', accountId: 'acct_1', asset: 'USDC', amountMinor: 1n, expiresAtMs: 1_000, createdAtMs: 0 }
    let seed = 0x51ed27
    const random = () => {
      seed = (Math.imul(seed ^ (seed >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
      return seed / 2 ** 32
    }
    const holds = new PendingHolds()
    // 1,024 slots to start with (and a table of 2,048 places): filled to the last slot, never grown.
    const ids = Array.from({ length: 1_024 }, () => `hold_${Array.from({ length: 4 }, () => Math.floor(random() * 2 ** 32).toString(16).padStart(8, '0')).join('')}`)
    const pending = new Set<string>()
    for (let round = 0; round < 300; round++) {
      for (const id of ids) {
        if (!pending.has(id)) {
          holds.set(id, newPendingHold({ ...fields, id }))
          pending.add(id)
        }
      }
      for (const id of ids) {
        if (pending.has(id) && random() < 0.05) {
          expect(holds.delete(id)).toBe(true)
          pending.delete(id)
        }
      }
      for (const id of ids) expect(holds.get(id)?.id).toBe(pending.has(id) ? id : undefined)
      expect(holds.size).toBe(pending.size)
    }
  })
})

describe('the id table\'s probe runs across its end', () => {
  test('holds whose run wraps to the table\'s start are found after any of them is deleted', () => {
    const fields = { orgId: 'org_1', accountId: 'acct_1', asset: 'USDC', amountMinor: 1n, expiresAtMs: 1_000, createdAtMs: 0 }
    // Ids whose home is the last of the table's 2,048 places, found through the table's own hash
    // (private: a random test hardly ever makes a run wrap).
    const probe = new PendingHolds() as unknown as { wordsOf(id: string): boolean; hashOfKey(): number }
    const lastPlace: string[] = []
    for (let index = 0; lastPlace.length < 4; index++) {
      const id = `hold_${index.toString(16).padStart(32, '0')}`
      probe.wordsOf(id)
      if ((probe.hashOfKey() & 2047) === 2047) lastPlace.push(id)
    }
    // And one whose home is the table's first place, which the wrapped run pushes along.
    let first = ''
    for (let index = 1 << 20; first === ''; index++) {
      const id = `hold_${index.toString(16).padStart(32, '0')}`
      probe.wordsOf(id)
      if ((probe.hashOfKey() & 2047) === 0) first = id
    }
    for (let deleted = 0; deleted < 5; deleted++) {
      const holds = new PendingHolds()
      const all = [...lastPlace, first]
      for (const id of all) holds.set(id, newPendingHold({ ...fields, id }))
      expect(holds.delete(all[deleted]!)).toBe(true)
      for (const id of all) expect(holds.get(id)?.id).toBe(id === all[deleted] ? undefined : id)
      // And again after a second delete, and a re-add.
      const second = all[(deleted + 2) % all.length]!
      holds.delete(second)
      holds.set(all[deleted]!, newPendingHold({ ...fields, id: all[deleted]! }))
      for (const id of all) expect(holds.get(id)?.id).toBe(id === second ? undefined : id)
    }
  })
})
