import { assert } from '../lib/assert.ts'
import { hexWord } from '../lib/ids.ts'
import { ExpiryIndex } from './hold-expiry-index.ts'
import { StoredHold, type HoldSlots, type PendingHold } from './pending-hold.ts'

/** Slots (and twice as many places in the id table) to start with; both double when full. */
const INITIAL_CAPACITY = 1_024
const ID_PREFIX = 'hold_'
/** An id of our format after its prefix: 32 lowercase hex digits, the UUIDv7's 128 bits. */
const ID_HEX_LENGTH = 32

/**
 * Strings shared by many holds (organizations, accounts, assets, owner kinds), each kept once and
 * named by its number.
 */
class Interned {
  private readonly numbers = new Map<string, number>()
  private readonly strings: string[] = []

  numberOf(value: string): number {
    let number = this.numbers.get(value)
    if (number === undefined) {
      number = this.strings.length
      this.strings.push(value)
      this.numbers.set(value, number)
    }
    return number
  }

  stringOf(number: number): string {
    return this.strings[number]!
  }

  /** The value's number if it was ever kept, without keeping it. */
  numberIfKnown(value: string): number | undefined {
    return this.numbers.get(value)
  }
}

/**
 * The pending holds memory knows, by id, with an expiry index beside them per organization (each
 * organization has its own clock). The expiry sweep then costs what is due, not what is pending.
 *
 * A hold is kept in typed arrays, not as an object: one slot per hold (its id's 128 bits, its
 * organization, account, asset and owner kind by number, its amount, times and flags), found by
 * its id through an open-addressing table of slot numbers, and filed in the expiry index as its
 * slot and generation. So however many holds are pending (up to a day of uncaptured
 * authorizations), the garbage collector has nothing of them to trace: with 300,000 uncaptured
 * authorizations a full collection took 75.9 ms when each hold was an object and its id a string,
 * and 12.1 ms as typed arrays, what it took before any (`bench/authorize-memory.ts`). Callers get views (`StoredHold`): `get` and `due` make one per call, cheap and
 * short-lived, and `set` attaches the caller's own. Whether a view still shows a pending hold is
 * `isPending`, not its identity: two views of one hold are different objects.
 *
 * Ids not of the `hold_<32 hex>` form (only tests make them) are kept in a map beside the table.
 * Amounts past a safe integer and owner ids that do not follow their hold's id (`pay_X` owning
 * `hold_X`) are kept in maps too: neither happens for an authorization.
 *
 * The index is lazy: holds that were captured or released stay in their bucket until the sweep
 * reaches them, where it drops them because their slot's generation moved on.
 */
export class PendingHolds implements HoldSlots {
  private capacity = 0
  /** The id's 128 bits, four words per slot. */
  private words = new Uint32Array(0)
  /** Organization, account, asset and owner kind numbers (`Interned`); owner kind -1: none or not following. */
  private references = new Int32Array(0)
  /** Expiry, creation (epoch ms) and amount (a safe integer, or NaN: see `bigAmounts`). */
  private numbers = new Float64Array(0)
  private flagBytes = new Uint8Array(0)
  /** Bumped at every delete: a view or an index entry of an earlier generation is stale. */
  private generations = new Uint32Array(0)
  private free: number[] = []
  private used = 0
  /** Places of the id table (slot + 1; 0 empty), linear probing, at most half full. */
  private table = new Int32Array(0)
  private readonly otherIds = new Map<string, number>()
  /** The id string of a slot whose id is not of our form. */
  private readonly otherIdOf = new Map<number, string>()
  private readonly bigAmounts = new Map<number, bigint>()
  /** Owner ids that do not follow their hold's id, by slot. */
  private readonly otherOwners = new Map<number, string>()
  private readonly orgs = new Interned()
  private readonly accounts = new Interned()
  private readonly assets = new Interned()
  private readonly ownerKinds = new Interned()
  private readonly expiries = new Map<string, ExpiryIndex>()
  /** Scratch words of an id being looked up. */
  private readonly key = new Uint32Array(4)

  constructor() {
    this.grow(INITIAL_CAPACITY)
  }

  get size(): number {
    return this.used
  }

  /** Printed (a view's `store`, a log) as its size, not its arrays. */
  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `PendingHolds(${this.used} pending)`
  }

  /** A view of the pending hold with this id (a new object at each call), or undefined. */
  get(id: string): PendingHold | undefined {
    const slot = this.find(id)
    return slot < 0 ? undefined : this.view(slot, id)
  }

  /** Whether `hold` is a view of a hold pending here now (not deleted since it was set or read). */
  isPending(hold: PendingHold): boolean {
    return hold instanceof StoredHold && hold.store === this && hold.attached
  }

  /**
   * Keeps `hold` (made by `newPendingHold`, or a view) as pending under its id, and attaches it.
   * Setting a view of the hold already pending under that id changes nothing but files it in the
   * expiry index again (due once per sweep all the same); any other hold under that id is replaced.
   */
  set(id: string, hold: PendingHold): this {
    assert(hold instanceof StoredHold, 'pending holds are made by newPendingHold')
    assert(hold.id === id, `a pending hold is kept under its own id (${hold.id}, not ${id})`)
    // The id is read once: its words stay in `key` for the insert (a delete reads the same ones).
    const ours = this.wordsOf(id)
    let slot = this.slotOf(id, ours)
    if (slot >= 0 && !(hold.store === this && hold.slot === slot && hold.attached)) {
      this.delete(id)
      slot = -1
    }
    if (slot < 0) slot = this.insert(hold, ours)
    hold.store = this
    hold.slot = slot
    hold.generation = this.generations[slot]!
    let index = this.expiries.get(hold.orgId)
    if (index === undefined) {
      index = new ExpiryIndex()
      this.expiries.set(hold.orgId, index)
    }
    index.add(slot, this.generations[slot]!, hold.expiresAtMs)
    return this
  }

  delete(id: string): boolean {
    const ours = this.wordsOf(id)
    const slot = this.slotOf(id, ours)
    if (slot < 0) return false
    this.unlink(slot, ours)
    this.generations[slot] = (this.generations[slot]! + 1) >>> 0
    this.flagBytes[slot] = 0
    this.bigAmounts.delete(slot)
    this.otherOwners.delete(slot)
    this.free.push(slot)
    this.used -= 1
    return true
  }

  /** Forgets every pending hold; views of them are detached (their slots' generations move on). */
  clear(): void {
    for (let slot = 0; slot < this.capacity; slot++) this.generations[slot] = (this.generations[slot]! + 1) >>> 0
    this.flagBytes.fill(0)
    this.table.fill(0)
    this.free = []
    for (let slot = this.capacity - 1; slot >= 0; slot--) this.free.push(slot)
    this.used = 0
    this.otherIds.clear()
    this.otherIdOf.clear()
    this.bigAmounts.clear()
    this.otherOwners.clear()
    this.expiries.clear()
  }

  /** Forgets the organizations' pending holds (`Ledger.forgetOrganizations`); views of them are detached. */
  forgetOrganizations(orgIds: ReadonlySet<string>): void {
    const numbers = new Set<number>()
    for (const orgId of orgIds) {
      const number = this.orgs.numberIfKnown(orgId)
      if (number !== undefined) numbers.add(number)
      this.expiries.delete(orgId)
    }
    if (numbers.size === 0) return
    const free = new Set(this.free)
    for (let slot = 0; slot < this.capacity; slot++) {
      if (!free.has(slot) && numbers.has(this.references[slot * 4]!)) this.delete(this.idOf(slot))
    }
  }

  /**
   * Pending holds whose organization's clock has reached their expiry, oldest first per
   * organization, at most `max`. Holds that are closing right now are skipped but stay indexed (a
   * failed close gives them back as pending); so do the holds answered, until they are deleted (an
   * expiry that fails leaves them due for the next sweep).
   */
  due(nowMs: (orgId: string) => number, max: number): PendingHold[] {
    const due: PendingHold[] = []
    const seen = new Set<number>()
    for (const [orgId, index] of this.expiries) {
      index.collectDue(nowMs(orgId), max, this, seen, due)
      if (index.empty) this.expiries.delete(orgId)
      if (due.length >= max) break
    }
    return due
  }

  /** The slot's generation now (see `StoredHold`). */
  generationOf(slot: number): number {
    return this.generations[slot]!
  }

  flagsOf(slot: number): number {
    return this.flagBytes[slot]!
  }

  setFlags(slot: number, flags: number): void {
    this.flagBytes[slot] = flags
  }

  ownerOf(slot: number, holdId: string): string | undefined {
    const kind = this.references[slot * 4 + 3]!
    if (kind >= 0) return `${this.ownerKinds.stringOf(kind)}_${holdId.slice(holdId.indexOf('_') + 1)}`
    return this.otherOwners.get(slot)
  }

  setOwner(slot: number, holdId: string, ownerId: string | undefined): void {
    const kind = ownerId === undefined ? undefined : ownerKindOf(holdId, ownerId)
    this.references[slot * 4 + 3] = kind === undefined ? -1 : this.ownerKinds.numberOf(kind)
    if (ownerId !== undefined && kind === undefined) this.otherOwners.set(slot, ownerId)
    else this.otherOwners.delete(slot)
  }

  /** A new view of a pending slot. */
  view(slot: number, id = this.idOf(slot)): StoredHold {
    const base = slot * 4
    const times = slot * 3
    const stored = this.numbers[times + 2]!
    const hold = new StoredHold(
      {
        id,
        orgId: this.orgs.stringOf(this.references[base]!),
        accountId: this.accounts.stringOf(this.references[base + 1]!),
        asset: this.assets.stringOf(this.references[base + 2]!),
        expiresAtMs: this.numbers[times]!,
        createdAtMs: this.numbers[times + 1]!,
        ownerId: this.ownerOf(slot, id),
      },
      Number.isNaN(stored) ? this.bigAmounts.get(slot)! : stored,
      this.flagBytes[slot]!,
    )
    hold.store = this
    hold.slot = slot
    hold.generation = this.generations[slot]!
    return hold
  }

  private idOf(slot: number): string {
    const other = this.otherIdOf.get(slot)
    if (other !== undefined) return other
    let hex = ''
    for (let word = 0; word < 4; word++) hex += this.words[slot * 4 + word]!.toString(16).padStart(8, '0')
    return `${ID_PREFIX}${hex}`
  }

  /** Keeps a hold in a free slot; `ours`: its id is of our form, its words read into `key`. */
  private insert(hold: StoredHold, ours: boolean): number {
    if (this.free.length === 0) this.grow(this.capacity * 2)
    const slot = this.free.pop()!
    const base = slot * 4
    const times = slot * 3
    if (ours) {
      for (let word = 0; word < 4; word++) this.words[base + word] = this.key[word]!
      this.place(slot)
    } else {
      this.otherIds.set(hold.id, slot)
      this.otherIdOf.set(slot, hold.id)
    }
    this.references[base] = this.orgs.numberOf(hold.orgId)
    this.references[base + 1] = this.accounts.numberOf(hold.accountId)
    this.references[base + 2] = this.assets.numberOf(hold.asset)
    this.setOwner(slot, hold.id, hold.ownerId)
    this.numbers[times] = hold.expiresAtMs
    this.numbers[times + 1] = hold.createdAtMs
    const amount = hold.amountKept
    if (typeof amount === 'number') this.numbers[times + 2] = amount
    else {
      this.numbers[times + 2] = Number.NaN
      this.bigAmounts.set(slot, amount)
    }
    this.flagBytes[slot] = hold.flagsKept
    this.used += 1
    return slot
  }

  /** The slot of a pending hold's id, or -1. */
  private find(id: string): number {
    return this.slotOf(id, this.wordsOf(id))
  }

  /** `find`, the id's words already read (`ours`: into `key`). */
  private slotOf(id: string, ours: boolean): number {
    if (!ours) return this.otherIds.get(id) ?? -1
    const mask = this.table.length - 1
    for (let place = this.hashOfKey() & mask; ; place = (place + 1) & mask) {
      const entry = this.table[place]!
      if (entry === 0) return -1
      if (this.keyAt(entry - 1)) return entry - 1
    }
  }

  /** Files a slot whose words are set in the id table. */
  private place(slot: number): void {
    const mask = this.table.length - 1
    let place = this.hashOf(slot) & mask
    while (this.table[place] !== 0) place = (place + 1) & mask
    this.table[place] = slot + 1
  }

  /** Takes a slot out of the id table (backward-shift deletion: no tombstones), or out of the map beside it when its id is not of our form (`ours` false). */
  private unlink(slot: number, ours: boolean): void {
    if (!ours) {
      this.otherIds.delete(this.otherIdOf.get(slot)!)
      this.otherIdOf.delete(slot)
      return
    }
    const mask = this.table.length - 1
    let hole = this.hashOf(slot) & mask
    while (this.table[hole] !== slot + 1) hole = (hole + 1) & mask
    for (let place = (hole + 1) & mask; this.table[place] !== 0; place = (place + 1) & mask) {
      const home = this.hashOf(this.table[place]! - 1) & mask
      // The entry at `place` may move into the hole if its home is not within (hole, place].
      if ((place > hole && (home <= hole || home > place)) || (place < hole && home <= hole && home > place)) {
        this.table[hole] = this.table[place]!
        hole = place
      }
    }
    this.table[hole] = 0
  }

  /** Reads an id of our form into `key`; false for any other id. */
  private wordsOf(id: string): boolean {
    if (id.length !== ID_PREFIX.length + ID_HEX_LENGTH || !id.startsWith(ID_PREFIX)) return false
    for (let word = 0; word < 4; word++) {
      const value = hexWord(id, ID_PREFIX.length + word * 8)
      if (value < 0) return false
      this.key[word] = value
    }
    return true
  }

  private keyAt(slot: number): boolean {
    const base = slot * 4
    return this.words[base] === this.key[0] && this.words[base + 1] === this.key[1] && this.words[base + 2] === this.key[2] && this.words[base + 3] === this.key[3]
  }

  private hashOfKey(): number {
    return mix(this.key[0]!, this.key[1]!, this.key[2]!, this.key[3]!)
  }

  private hashOf(slot: number): number {
    const base = slot * 4
    return mix(this.words[base]!, this.words[base + 1]!, this.words[base + 2]!, this.words[base + 3]!)
  }

  /** Room for `capacity` slots (existing ones kept), and an id table twice that, rebuilt. */
  private grow(capacity: number): void {
    const previous = this.capacity
    const words = new Uint32Array(capacity * 4)
    words.set(this.words.subarray(0, previous * 4))
    const references = new Int32Array(capacity * 4)
    references.set(this.references.subarray(0, previous * 4))
    const numbers = new Float64Array(capacity * 3)
    numbers.set(this.numbers.subarray(0, previous * 3))
    const flagBytes = new Uint8Array(capacity)
    flagBytes.set(this.flagBytes.subarray(0, previous))
    const generations = new Uint32Array(capacity)
    generations.set(this.generations.subarray(0, previous))
    this.words = words
    this.references = references
    this.numbers = numbers
    this.flagBytes = flagBytes
    this.generations = generations
    // Free slots are taken lowest first.
    for (let slot = capacity - 1; slot >= previous; slot--) this.free.push(slot)
    this.capacity = capacity
    const filed = this.table
    this.table = new Int32Array(capacity * 2)
    for (const entry of filed) if (entry !== 0) this.place(entry - 1)
  }
}

/** A 32-bit hash of an id's four words (the UUIDv7's random bits are mostly in the last three). */
function mix(a: number, b: number, c: number, d: number): number {
  let hash = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b)
  hash = Math.imul(hash ^ b ^ (hash >>> 15), 0xc2b2ae35)
  hash = Math.imul(hash ^ c ^ (hash >>> 13), 0x27d4eb2f)
  hash = Math.imul(hash ^ d ^ (hash >>> 16), 0x165667b1)
  return (hash ^ (hash >>> 15)) >>> 0
}

/** `ownerId`'s kind (`pay` of `pay_X`) when its id after the kind is the hold's (`hold_X`), else undefined. */
function ownerKindOf(holdId: string, ownerId: string): string | undefined {
  const ownerAt = ownerId.indexOf('_')
  const holdAt = holdId.indexOf('_')
  if (ownerAt <= 0 || holdAt <= 0 || ownerId.length - ownerAt !== holdId.length - holdAt || !ownerId.endsWith(holdId.slice(holdAt))) return undefined
  return ownerId.slice(0, ownerAt)
}
