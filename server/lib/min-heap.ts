/**
 * A binary min-heap kept in a plain array: `less(a, b)` orders it, the least item at index 0.
 * Functions rather than a class, so a heap of plain numbers stays an array of numbers.
 */
export function heapPush<T>(heap: T[], item: T, less: (a: T, b: T) => boolean): void {
  let index = heap.length
  heap.push(item)
  while (index > 0) {
    const parent = (index - 1) >> 1
    if (!less(item, heap[parent]!)) break
    heap[index] = heap[parent]!
    index = parent
  }
  heap[index] = item
}

/** Takes the least item out (undefined when the heap is empty). */
export function heapPop<T>(heap: T[], less: (a: T, b: T) => boolean): T | undefined {
  const top = heap[0]
  const last = heap.pop()
  if (heap.length === 0 || last === undefined) return top
  let index = 0
  for (;;) {
    const left = 2 * index + 1
    if (left >= heap.length) break
    const right = left + 1
    const child = right < heap.length && less(heap[right]!, heap[left]!) ? right : left
    if (!less(heap[child]!, last)) break
    heap[index] = heap[child]!
    index = child
  }
  heap[index] = last
  return top
}
