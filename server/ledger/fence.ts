import { queryText, type Transaction } from '../../db/client.ts'
import { ApiError } from '../lib/errors.ts'

/**
 * A precondition every commit of the ledger checks in the same statement or transaction as its
 * writes: for instance that this instance still holds the lease of each organization it writes for.
 * The ledger knows nothing of what it means; it only refuses to commit when it is false.
 */
export interface CommitFence {
  /**
   * A SQL boolean expression (text fixed for the process's life) that must be true for a batch to
   * commit. It may use the placeholder `:fence` for its one parameter (the writer substitutes the
   * parameter number).
   */
  readonly condition: string
  /** The parameter's value (a JSON text) for a batch writing for these organizations. */
  parameter(orgIds: ReadonlySet<string>): string
}

export const FENCE_PLACEHOLDER = ':fence'

/** What a caller whose commit a false fence refused is told: nothing was applied, and another instance may take it. */
export const FENCE_REFUSAL_MESSAGE = 'this instance no longer owns the organization; nothing was applied; retry'

export function fenceRefusal(): ApiError {
  return new ApiError('partner_unavailable', FENCE_REFUSAL_MESSAGE)
}

/**
 * The text the one-statement batch raises (through `kassa_refuse`) when its fence is false, told
 * apart from a lost order guard by `isFenceRefusal`.
 */
export const FENCE_REFUSED_TEXT = 'ledger writer: the commit fence refused batch'

/** Whether a batch's error is its fence's refusal (the driver's error, or one wrapping it). */
export function isFenceRefusal(error: unknown): boolean {
  for (let current = error, depth = 0; current instanceof Error && depth < 3; current = current.cause, depth++) {
    if (current instanceof FenceRefused) return true
    if (current.message.includes(FENCE_REFUSED_TEXT)) return true
  }
  return false
}

/** A transaction's fence answered false: it was rolled back. */
export class FenceRefused extends Error {
  constructor() {
    super(FENCE_REFUSED_TEXT)
  }
}

/** The organizations some operations write for. */
export function orgsOf(ops: Iterable<{ orgId: string }>): Set<string> {
  const orgs = new Set<string>()
  for (const op of ops) orgs.add(op.orgId)
  return orgs
}

/**
 * In a transaction (guarded writes, a bundle committed aside): `SELECT <condition>` first, with the
 * parameter as `$1`; false throws `FenceRefused`, which rolls the transaction back.
 */
export async function checkFence(tx: Transaction, fence: CommitFence | undefined, orgIds: ReadonlySet<string>): Promise<void> {
  if (fence === undefined) return
  // A condition that reads no parameter is sent with none (Postgres refuses a parameter it does not read).
  const params = fence.condition.includes(FENCE_PLACEHOLDER) ? [fence.parameter(orgIds)] : []
  const [row] = await queryText<{ ok: boolean | null }>(tx, { text: `select (${fenceText(fence, '$1')}) as ok`, params })
  if (row?.ok !== true) throw new FenceRefused()
}

/** The condition with its placeholder replaced by `parameter` (SQL naming the parameter). */
export function fenceText(fence: CommitFence, parameter: string): string {
  return fence.condition.replaceAll(FENCE_PLACEHOLDER, parameter)
}
