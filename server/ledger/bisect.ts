/**
 * Whether a batch failed on what one of its operations carried, rather than on the database or the
 * connection: then the operation at fault is found by bisection (the batch sent again in halves,
 * see `GroupCommitWriter.isolateFailure`) and the others go on. SQLSTATE class 22, data exception: a
 * string Postgres cannot store; class 23, integrity: a duplicate key, a balance check; class 21,
 * cardinality: an upsert meeting the same row twice ("ON CONFLICT DO UPDATE command cannot affect
 * row a second time"), which two operations of one batch writing one row cause together and either
 * commits alone.
 */
export function isOperationFault(error: unknown): boolean {
  // The driver's error, or the one a query builder wrapped it in.
  for (let current = error, depth = 0; current instanceof Error && depth < 3; current = current.cause, depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === 'string' && code.length === 5) return code.startsWith('22') || code.startsWith('23') || code.startsWith('21')
  }
  return false
}

/**
 * Marks a failed batch's two halves for sending again, each alone as a batch of its own: the items
 * of one half share an object (`isolation`), and a batch takes only items sharing its first one's.
 * A half that fails is halved again; an operation failing alone is the one at fault.
 */
export function markHalves(batch: ReadonlyArray<{ isolation?: object }>): void {
  const half = Math.ceil(batch.length / 2)
  const first = {}
  const second = {}
  batch.forEach((item, index) => {
    item.isolation = index < half ? first : second
  })
}
