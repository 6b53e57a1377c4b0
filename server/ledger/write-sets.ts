import type { SQL } from 'drizzle-orm'
import type { PgTable } from 'drizzle-orm/pg-core'
import { upsertTail } from '../../db/bulk.ts'
import { assert, AssertionError } from '../lib/assert.ts'

/**
 * The rows an operation may carry besides its movement, one field per kind of row, each naming the
 * row's type. The ledger declares none: each module that writes rows with its money adds its field
 * here from its own `write-sets.ts` (TypeScript declaration merging), so call sites stay typed
 * (`payments: [row]`) while the ledger knows no feature table.
 */
export interface WriteSetRows {}

export type WriteSetField = keyof WriteSetRows & string

/** The rows an operation carries, by field (see `WriteSetRows`). */
export type OperationRows = { [Field in WriteSetField]?: Array<WriteSetRows[Field]> }

/**
 * How the rows of one field are written in a batch statement: one part (a data-modifying CTE) per
 * write set, its rows read from a JSON parameter of its own. The batch is one statement, so the
 * database checks foreign keys at its end; `order` only fixes the parts' order, which with their
 * row shapes decides the statement's text (cached per shape, see `StatementTexts`).
 */
export interface WriteSet {
  /** Names its part of the statement and its parameter; unique among a ledger's write sets. */
  readonly name: string
  /** The operation field it takes its rows from. Two write sets may share one (see `operations`). */
  readonly field: WriteSetField
  readonly table: PgTable
  /** Its place among the write sets (ascending), after the movement and the balances. */
  readonly order: number
  /**
   * Rows moving to a new state: `insert … on conflict (target) do update` of `columns`. Without it
   * the rows are plain inserts, which a second row with the same key fails loudly.
   */
  readonly upsert?: { readonly target: string; readonly columns: readonly string[] }
  /**
   * A row is opened and closed by different operations, possibly in one batch: only the last state
   * queued for an id (queue order is decision order) is written. One statement cannot write a row twice.
   */
  readonly lastStatePerId?: boolean
  /**
   * Which operations' rows it takes: every one (the default), only those whose movement its row
   * records (`recordedByRow`), or only the others.
   */
  readonly operations?: 'all' | 'recordingMovement' | 'ownMovement'
  /**
   * Another write set of the same field whose ids this one never repeats in a batch (a payment
   * created in a batch is not also moved to a new state in it): asserted, because two parts of one
   * statement writing the same row would fail the batch.
   */
  readonly disjointFrom?: string
  /**
   * For a write set of `recordingMovement` operations: the movements its rows record, as the
   * journal reads them (server/ledger/journal.ts).
   */
  readonly journal?: JournalSource
}

/**
 * Movements recorded by a module's rows instead of `ledger_movements` rows, in SQL over the
 * module's table: `legs` selects (org_id, account_id, bucket, asset, amount) for every leg,
 * `movements` selects their number as one value, and each has `legsPerMovement` legs.
 */
export interface JournalSource {
  readonly legs: SQL
  readonly movements: SQL
  readonly legsPerMovement: number
}

/** A write set with its table's row type checked against its field's (`WriteSetRows`). */
export function defineWriteSet<Field extends WriteSetField>(set: WriteSet & { field: Field; table: PgTable & { $inferInsert: WriteSetRows[Field] } }): WriteSet {
  return set
}

/** A registered write set with what its statement part needs, worked out once. */
export interface CompiledWriteSet extends WriteSet {
  /** The ON CONFLICT clause appended to its insert, or undefined for a plain insert. */
  readonly tail: string | undefined
}

/**
 * An operation's own fields (not rows of a write set): anything else it carries must be a
 * registered write set's field, or its rows would be silently left out.
 */
const OPERATION_FIELDS = new Set([
  'orgId',
  'createdAt',
  'postings',
  'movementId',
  'movementKind',
  'reference',
  'recordedByRow',
  'guardedWrites',
  'idempotencyRecord',
  'idempotencyAnswer',
  'deadline',
  'reserve',
  'revert',
  'committed',
])

/** The write sets a ledger commits, registered by the modules when the ledger is built. */
export class WriteSetRegistry {
  private sets: CompiledWriteSet[] = []
  private readonly fields = new Set<string>()

  register(sets: readonly WriteSet[]): void {
    for (const set of sets) {
      assert(!this.sets.some((known) => known.name === set.name), `a write set named ${set.name} is already registered`)
      assert(!this.sets.some((known) => known.order === set.order), `two write sets share the order ${set.order}`)
      assert(/^[a-z][a-z_]*$/.test(set.name) && !RESERVED_NAMES.has(set.name), `write set name ${set.name} is not a free lower-case SQL name`)
      assert(!OPERATION_FIELDS.has(set.field), `write set field ${set.field} is an operation's own field`)
      this.sets.push({ ...set, tail: set.upsert === undefined ? undefined : upsertTail(set.upsert.target, set.upsert.columns) })
      this.fields.add(set.field)
    }
    this.sets = [...this.sets].sort((left, right) => left.order - right.order)
    for (const set of this.sets) {
      if (set.disjointFrom === undefined) continue
      const other = this.sets.find((known) => known.name === set.disjointFrom)
      assert(other === undefined || other.field === set.field, `write set ${set.name} is disjoint from one of another field`)
    }
  }

  /** In statement order. */
  get all(): readonly CompiledWriteSet[] {
    return this.sets
  }

  /** The movements recorded by rows of registered write sets (see `WriteSet.journal`). */
  get journalSources(): readonly JournalSource[] {
    return this.sets.flatMap((set) => (set.journal === undefined ? [] : [set.journal]))
  }

  /** The rows an operation carries in write sets that record its movement (`recordingMovement`). */
  movementRecords(op: object): Array<Record<string, unknown>> {
    const records: Array<Record<string, unknown>> = []
    for (const set of this.sets) {
      if (set.operations !== 'recordingMovement') continue
      const rows = (op as Record<string, unknown>)[set.field]
      if (Array.isArray(rows)) records.push(...(rows as Array<Record<string, unknown>>))
    }
    return records
  }

  /**
   * Refuses an operation carrying rows no registered write set takes (a module not registered with
   * this ledger): a programmer error, thrown before anything is reserved.
   */
  assertCarried(op: object): void {
    for (const field in op) {
      if (OPERATION_FIELDS.has(field) || this.fields.has(field)) continue
      if ((op as Record<string, unknown>)[field] === undefined) continue
      throw new AssertionError(`the operation carries ${field}, but no write set for ${field} is registered with the ledger`)
    }
  }
}

/** Names the batch statement's own parts use. */
const RESERVED_NAMES = new Set(['input', 'claimed', 'lost', 'claims', 'guard', 'movements', 'd', 'balances', 'created', 'updated', 'answers', 'fence'])
