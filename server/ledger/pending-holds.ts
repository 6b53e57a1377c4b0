import type { PendingHold } from './ledger.ts'

/**
 * The pending holds memory knows, by id, with an expiry index beside the map: one min-heap of
 * expiry times per organization (each organization has its own clock). The expiry sweep then
 * costs what is due, not what is pending: with a hundred thousand authorizations outstanding a
 * scan of every hold would block the event loop for milliseconds four times a second.
 *
 * The index is lazy: holds that were captured or released stay in their heap until they reach its
 * top, where the sweep drops them because the map no longer holds them.
 */
export class PendingHolds extends Map<string, PendingHold> {
  private readonly heaps = new Map<string, PendingHold[]>()

  override set(id: string, hold: PendingHold): this {
    super.set(id, hold)
    // Map's constructor calls set before the heaps exist when given entries; none are given here.
    if (this.heaps !== undefined) push(this.heapFor(hold.orgId), hold)
    return this
  }

  override clear(): void {
    super.clear()
    this.heaps.clear()
  }

  /**
   * Pending holds whose organization's clock has reached their expiry, oldest first per
   * organization, at most `max`. Holds that are closing right now are skipped but stay indexed (a
   * failed close gives them back as pending).
   */
  due(nowMs: (orgId: string) => number, max: number): PendingHold[] {
    const due: PendingHold[] = []
    const seen = new Set<PendingHold>()
    for (const [orgId, heap] of this.heaps) {
      const now = nowMs(orgId)
      const closing: PendingHold[] = []
      while (heap.length > 0 && due.length < max && heap[0]!.expiresAt.getTime() <= now) {
        const hold = pop(heap)!
        if (seen.has(hold) || this.get(hold.id) !== hold) continue
        seen.add(hold)
        if (hold.closing) closing.push(hold)
        else due.push(hold)
      }
      // Still pending: a hold due now stays due, and the next sweep looks at it again.
      for (const hold of [...closing, ...due.filter((entry) => entry.orgId === orgId)]) push(heap, hold)
      if (heap.length === 0) this.heaps.delete(orgId)
      if (due.length >= max) break
    }
    return due
  }

  private heapFor(orgId: string): PendingHold[] {
    let heap = this.heaps.get(orgId)
    if (heap === undefined) {
      heap = []
      this.heaps.set(orgId, heap)
    }
    return heap
  }
}

const earlier = (a: PendingHold, b: PendingHold) => a.expiresAt.getTime() < b.expiresAt.getTime()

function push(heap: PendingHold[], hold: PendingHold): void {
  heap.push(hold)
  let index = heap.length - 1
  while (index > 0) {
    const parent = (index - 1) >> 1
    if (!earlier(heap[index]!, heap[parent]!)) break
    ;[heap[index], heap[parent]] = [heap[parent]!, heap[index]!]
    index = parent
  }
}

function pop(heap: PendingHold[]): PendingHold | undefined {
  const top = heap[0]
  const last = heap.pop()
  if (heap.length === 0 || last === undefined) return top
  heap[0] = last
  let index = 0
  for (;;) {
    const left = index * 2 + 1
    const right = left + 1
    let smallest = index
    if (left < heap.length && earlier(heap[left]!, heap[smallest]!)) smallest = left
    if (right < heap.length && earlier(heap[right]!, heap[smallest]!)) smallest = right
    if (smallest === index) break
    ;[heap[index], heap[smallest]] = [heap[smallest]!, heap[index]!]
    index = smallest
  }
  return top
}
