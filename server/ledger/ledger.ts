import { and, eq, inArray, ne, or } from 'drizzle-orm'
import type { Database } from '../../db/client.ts'
import { ledgerBalances } from '../../db/schema/index.ts'
import { assert, AssertionError } from '../lib/assert.ts'
import { ApiError } from '../lib/errors.ts'
import type { AssetCode } from '../lib/assets.ts'
import type { MonotonicClock } from '../lib/monotonic-clock.ts'
import { AccountDirectory, type AccountRows } from './accounts.ts'
import { assertZeroSum, deltasOf, HotBalances, type BalanceDelta, type HotBalance } from './hot-balances.ts'
import { assertReservationRecord } from './journal.ts'
import { HoldLifecycle } from './hold-lifecycle.ts'
import type { PendingHold, PendingHoldFields } from './pending-hold.ts'
import { DEFAULT_ASSET_POLICIES, type AssetPolicy } from './policy.ts'
import type { CommitFence } from './fence.ts'
import type { GuardedWrite, LedgerOperation } from './operation.ts'
import { GroupCommitWriter } from './writer.ts'
import { WriteSetRegistry, type JournalSource, type WriteSet } from './write-sets.ts'

export type { PendingHold }
export { newPendingHold } from './pending-hold.ts'
export type { ClosingHooks, HoldLifecycle } from './hold-lifecycle.ts'

export interface LedgerOptions {
  groupCommit: boolean
  /** Where accounts are stored (the accounts module's; the ledger knows no feature table). */
  accounts: AccountRows
  batchMax?: number
  /** The writer's own connection (see `DatabaseHandle.writer`); `db` when not given. */
  writerDb?: Database
  /** Batches in flight at once (see `WriterOptions.pipelineDepth`); 1 when not given. */
  pipelineDepth?: number
  /** Operations a batch sent behind another must carry (see `WriterOptions.pipelineMinOperations`); 1 when not given. */
  pipelineMinOperations?: number
  policies?: Readonly<Record<AssetCode, AssetPolicy>>
  /**
   * A precondition on the organization of every operation, checked before anything is reserved:
   * it throws (an `ApiError`) to refuse. Cluster mode refuses an organization this instance does
   * not own (docs/scale-out.md), so that such an operation never joins a batch, where its refusal
   * at the commit would fail the operations behind it too.
   */
  admit?: (orgId: string) => void
  /** A precondition every commit checks with its writes (see `CommitFence`); none when not given. */
  fence?: CommitFence
  /** The writer's clock (`WriterOptions.clock`): the process's unless a test gives its own. */
  writerClock?: MonotonicClock
  /**
   * The pending holds to hold in memory from the start (of these organizations when `orgIds` is
   * given: `loadOrganizations`), read from where the module that keeps them stores them (the ledger
   * knows no feature table); none when not given.
   */
  pendingHolds?: (db: Database, orgIds?: readonly string[]) => Promise<PendingHoldFields[]>
}

const DEFAULT_BATCH_MAX = 256

/**
 * The one place money moves. A caller builds an operation (postings plus the rows describing it),
 * and `submit` decides against memory and reserves there in the same synchronous step, then
 * resolves once the group-commit writer has committed it.
 */
export class Ledger {
  readonly balances = new HotBalances()
  /** Pending holds: opened, closed and restored only through this (see `HoldLifecycle`). */
  readonly holds = new HoldLifecycle()
  readonly accounts: AccountDirectory
  readonly writer: GroupCommitWriter
  readonly policies: Readonly<Record<AssetCode, AssetPolicy>>

  private readonly pendingHoldsToLoad: LedgerOptions['pendingHolds']

  constructor(
    readonly db: Database,
    options: LedgerOptions,
  ) {
    this.pendingHoldsToLoad = options.pendingHolds
    this.accounts = new AccountDirectory(db, this.balances, options.accounts)
    this.writer = new GroupCommitWriter(db, options.writerDb ?? db, this.balances, {
      groupCommit: options.groupCommit,
      batchMax: options.batchMax ?? DEFAULT_BATCH_MAX,
      pipelineDepth: options.pipelineDepth ?? 1,
      pipelineMinOperations: options.pipelineMinOperations ?? 1,
      fence: options.fence,
      clock: options.writerClock,
    }, new WriteSetRegistry())
    this.policies = options.policies ?? DEFAULT_ASSET_POLICIES
    this.admit = options.admit
  }

  private readonly admit: ((orgId: string) => void) | undefined

  /**
   * Rebuilds what memory must hold before serving: the system accounts' balances, every account
   * holding funds in `held` or `in_flight` (a pending hold, a payment, a withdrawal on its way: their
   * later capture, release or outcome must find them resident), and every pending hold. Every other
   * account becomes resident on its first touch (see `AccountDirectory`).
   */
  async load(): Promise<void> {
    // As at a restart: nothing stays resident from before (tests re-read a second instance this way).
    this.accounts.forgetAll()
    this.balances.clear()
    for (const row of await this.db.select().from(ledgerBalances).where(eq(ledgerBalances.kind, 'system'))) this.balances.loadIfAbsent(row)
    const reserving = await this.db
      .selectDistinct({ accountId: ledgerBalances.accountId })
      .from(ledgerBalances)
      .where(and(eq(ledgerBalances.kind, 'customer'), or(ne(ledgerBalances.held, 0n), ne(ledgerBalances.inFlight, 0n))))
    await this.accounts.loadMany(reserving.map((row) => row.accountId))
    for (const fields of (await this.pendingHoldsToLoad?.(this.db)) ?? []) this.holds.load(fields)
  }

  /**
   * A module's write sets: the tables it commits with its money, and how (see `WriteSet`). Each
   * module registers its own when the ledger is built; an operation carrying rows of a field no
   * write set takes is refused before anything is reserved.
   */
  registerWriteSets(sets: readonly WriteSet[]): void {
    this.writer.writeSets.register(sets)
  }

  /** The movements recorded by registered write sets' rows, for reading the journal (`verifyLedger`). */
  get journalSources(): readonly JournalSource[] {
    return this.writer.writeSets.journalSources
  }

  /**
   * Forgets what memory holds of these organizations (their accounts, balances and pending
   * holds), as if this process had never touched them: another process now decides for them, and
   * what it commits would make this memory stale.
   */
  forgetOrganizations(orgIds: ReadonlySet<string>): void {
    this.accounts.forgetOrganizations(orgIds)
    this.balances.forgetOrganizations(orgIds)
    this.holds.forgetOrganizations(orgIds)
  }

  /**
   * Rebuilds these organizations' memory from Postgres as `load` does for all at a start (system
   * balances, accounts holding funds in `held` or `in_flight`, pending holds), after forgetting
   * what was there. Called when this process becomes the one that decides for them; nothing of
   * theirs may be on its way to the writer meanwhile.
   */
  async loadOrganizations(orgIds: readonly string[]): Promise<void> {
    this.forgetOrganizations(new Set(orgIds))
    for (let start = 0; start < orgIds.length; start += 1000) {
      const chunk = orgIds.slice(start, start + 1000)
      for (const row of await this.db.select().from(ledgerBalances).where(and(eq(ledgerBalances.kind, 'system'), inArray(ledgerBalances.orgId, chunk)))) this.balances.loadIfAbsent(row)
      const reserving = await this.db
        .selectDistinct({ accountId: ledgerBalances.accountId })
        .from(ledgerBalances)
        .where(and(inArray(ledgerBalances.orgId, chunk), eq(ledgerBalances.kind, 'customer'), or(ne(ledgerBalances.held, 0n), ne(ledgerBalances.inFlight, 0n))))
      await this.accounts.loadMany(reserving.map((row) => row.accountId))
      for (const fields of (await this.pendingHoldsToLoad?.(this.db, chunk)) ?? []) this.holds.load(fields)
    }
  }

  policy(asset: AssetCode): AssetPolicy {
    return this.policies[asset]
  }

  balance(orgId: string, accountId: string, asset: string): HotBalance | undefined {
    return this.balances.get(orgId, accountId, asset)
  }

  /**
   * Decides and reserves synchronously (throws `insufficient_available` and changes nothing when a
   * customer's available would go below zero), then waits for the commit. Everything the caller
   * checked before must be checked in the same synchronous step that calls this.
   */
  submit(op: LedgerOperation): Promise<void> {
    this.admit?.(op.orgId)
    this.writer.writeSets.assertCarried(op)
    assertZeroSum(op.postings)
    if (op.recordedByRow) assertReservationRecord(op, this.writer.writeSets.movementRecords(op))
    const deltas = deltasOf(op.orgId, op.postings, 1n)
    this.assertResident(deltas)
    const overdraft = this.balances.overdraftIn(deltas)
    if (overdraft) {
      if (overdraft.bucket !== 'available') {
        throw new AssertionError(`operation would take ${overdraft.bucket} of ${overdraft.accountId} below zero`)
      }
      throw new ApiError('insufficient_available', `Available ${overdraft.asset} of ${overdraft.accountId} does not cover this operation`)
    }
    this.balances.applyKeyed(deltas)
    op.reserve?.()
    return this.writer.enqueue(op, deltas)
  }

  /**
   * Commits several operations (of one or several organizations) as ONE database transaction, all
   * or nothing, with `guardedWrites` run first on it: a cycle's settlement, whose intents belong to
   * many organizations and must settle together or not at all. Decided and reserved in memory in
   * this synchronous step like `submit`; if a guarded write answers false, everything is undone and
   * the promise rejects with its refusal. The bundle commits on a connection of its own, beside the
   * writer's batches and not in their queue (`GroupCommitWriter.commitAside`), so requests keep
   * committing while it runs; its operations carry no idempotency record.
   */
  submitBundle(ops: LedgerOperation[], guardedWrites: GuardedWrite[]): Promise<void> {
    assert(ops.length > 0, 'a bundle has at least one operation')
    assert(guardedWrites.length > 0, 'a bundle has a guarded write that decides whether it commits')
    const deltas = new Map<string, BalanceDelta>()
    for (const op of ops) this.admit?.(op.orgId)
    for (const op of ops) {
      assert(op.recordedByRow !== true && op.idempotencyRecord === undefined && op.guardedWrites === undefined, 'a bundled operation is a plain movement')
      this.writer.writeSets.assertCarried(op)
      assertZeroSum(op.postings)
      deltasOf(op.orgId, op.postings, 1n, deltas)
    }
    this.assertResident(deltas)
    const overdraft = this.balances.overdraftIn(deltas)
    if (overdraft) {
      if (overdraft.bucket !== 'available') throw new AssertionError(`bundle would take ${overdraft.bucket} of ${overdraft.accountId} below zero`)
      throw new ApiError('insufficient_available', `Available ${overdraft.asset} of ${overdraft.accountId} does not cover this operation`)
    }
    this.balances.applyKeyed(deltas)
    for (const op of ops) op.reserve?.()
    return this.writer.commitAside(ops, guardedWrites, deltas)
  }

  /**
   * A customer balance that is not in memory is never decided on (it is not zero, it is unknown):
   * every path that moves money resolves its accounts through `accounts` first (see `AccountDirectory`).
   */
  private assertResident(deltas: ReadonlyMap<string, BalanceDelta>): void {
    for (const delta of deltas.values()) {
      if (delta.kind === 'customer' && !this.accounts.isResident(delta.accountId)) {
        throw new AssertionError(`account ${delta.accountId} is not resident: resolve it through ledger.accounts before submitting`)
      }
    }
  }

  /**
   * Takes back an operation that is still waiting for the writer: its reservation is undone and
   * nothing of it will be written. Answers false once the writer has taken it into a batch (its
   * fate is then that batch's).
   */
  withdraw(op: LedgerOperation): boolean {
    return this.writer.withdraw(op)
  }

  /** Waits for every queued operation to commit or fail (shutdown, tests). */
  async drain(): Promise<void> {
    await this.writer.idle()
  }
}

export async function openLedger(db: Database, options: LedgerOptions): Promise<Ledger> {
  const ledger = new Ledger(db, options)
  await ledger.load()
  return ledger
}
