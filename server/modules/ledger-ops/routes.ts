import { Elysia, t } from 'elysia'
import { invalid } from '../../lib/errors.ts'
import { roundTo } from '../../lib/histogram.ts'
import { IdParams } from '../../lib/params.ts'
import { apiDoc } from '../../platform/openapi.ts'
import type { Database } from '../../../db/client.ts'
import type { Ledger } from '../../ledger/ledger.ts'
import type { LoopLag } from '../../platform/loop-lag.ts'
import type { Clock } from '../clock/clock.ts'
import { verifyLedger } from '../../ledger/verify.ts'
import { appendEvent } from '../events/writer.ts'

const doc = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

const VerifyReportSchema = t.Object({
  ok: t.Boolean(),
  counts: t.Object({ balances: t.Integer(), movements: t.Integer(), postings: t.Integer() }),
  problems: t.Array(t.Object({ check: t.String(), detail: t.Record(t.String(), t.String()) })),
})

/** A `LatencyHistogram` snapshot (`server/lib/histogram.ts`) of `what`, cumulative since this instance started. */
export function histogramSchema(what: string, description: string) {
  return t.Object(
    {
      count: t.Integer({ description: `How many ${what} since this instance started` }),
      sumMs: t.Number(),
      maxMs: t.Number({ description: `The slowest of the ${what} since this instance started` }),
      buckets: t.Array(t.Object({ leMs: t.Union([t.Number(), t.Null()]), count: t.Integer() }), {
        description: `Per bucket, not cumulative: ${what} slower than the previous bound and at most leMs (null: slower than every bound). Subtract two readings to see a window.`,
      }),
    },
    { description },
  )
}

const AccountStatus = t.Object({ id: t.String(), orgId: t.String(), status: t.Union([t.Literal('active'), t.Literal('frozen')]) })

/** What the ledger's operator routes read and change. */
export interface LedgerOpsDeps {
  db: Database
  ledger: Ledger
  clock: Clock
  loopLag: LoopLag
  config: { groupCommit: boolean }
}

/** Operator routes of the ledger (under /ops/v1, authenticated by the operator token; all organizations): verify, writer stats, freeze and unfreeze. */
export function createLedgerOpsModule(deps: LedgerOpsDeps) {
  return { opsRoutes: ledgerOpsRoutes(deps) }
}

function ledgerOpsRoutes(deps: LedgerOpsDeps) {
  const setStatus = async (accountId: string, status: 'active' | 'frozen') => {
    const entry = await deps.ledger.accounts.setStatus(accountId, status, async (tx, changed) => {
      const type = status === 'frozen' ? 'account.frozen' : 'account.unfrozen'
      await appendEvent(tx, { orgId: changed.orgId, type, data: { accountId, externalId: changed.externalId }, created: deps.clock.now(changed.orgId) })
    })
    return { id: entry.id, orgId: entry.orgId, status: entry.status }
  }
  return new Elysia({ name: 'kassa/ops-ledger', prefix: '/ops/v1' })
    .get('/ledger/verify', () => verifyLedger(deps.db, deps.ledger.journalSources), {
      response: VerifyReportSchema,
      detail: doc(
        'Prove the ledger over the whole database',
        'Each balance equals the sum of its postings per bucket; every movement sums to zero per asset; every balance keeps total = available + held + inFlight + sum(allocations); no customer bucket is negative. The postings are the legs of every movement row and, for each authorized payment, the two legs of its reservation (its amount from available to held), which its payment row records instead of a movement row; counts.movements and counts.postings include those.',
      ),
    })
    .get(
      '/ledger/stats',
      ({ query }) => ({
        groupCommit: deps.config.groupCommit,
        committedOperations: deps.ledger.writer.committedOperations,
        committedBatches: deps.ledger.writer.committedBatches,
        queued: deps.ledger.writer.pendingCount(),
        eventLoopLagMs: roundTo(deps.loopLag.currentMs(), 2),
        ...(query.lagSince === undefined ? {} : { eventLoopLagSinceMs: lagSinceMs(deps, query.lagSince) }),
        commitLatencyMs: deps.ledger.writer.commitLatency.snapshot(),
        queueWaitMs: deps.ledger.writer.queueWait.snapshot(),
        durableMs: deps.ledger.writer.durableLatency.snapshot(),
      }),
      {
        query: t.Object(
          {
            // Its range is checked by the route, which names the field (a query number's own bounds
            // fail inside Elysia's conversion, whose error does not name the parameter).
            lagSince: t.Optional(
              t.Number({ description: 'A moment on the machine\'s wall clock, milliseconds since the Unix epoch (0 or more): the answer then also holds eventLoopLagSinceMs' }),
            ),
          },
          { additionalProperties: false },
        ),
        response: t.Object({
          groupCommit: t.Boolean(),
          committedOperations: t.Integer({ description: 'Ledger operations committed by this instance since it started' }),
          committedBatches: t.Integer({ description: 'Database transactions that committed them' }),
          queued: t.Integer({ description: 'Operations waiting for the writer right now' }),
          eventLoopLagMs: t.Number({ description: 'How late the event loop ran lately (the largest lag of the last 200 to 400 ms)' }),
          eventLoopLagSinceMs: t.Optional(
            t.Number({
              description:
                'With lagSince: how long the event loop kept its work waiting after that moment (of each late tick since, the part of its lateness after it; about the last ten seconds of ticks are kept), where eventLoopLagMs can hold lateness from before it',
            }),
          ),
          commitLatencyMs: histogramSchema('commits', 'From sending a batch to Postgres confirming its commit (the disk flush, and waiting behind the batches pipelined before it, included)'),
          queueWaitMs: histogramSchema(
            'operations sent',
            "From queueing a ledger operation to sending the batch that carries it: the wait for the batch ahead to commit. An operation's time to durable is this plus its batch's commit",
          ),
          durableMs: histogramSchema(
            'operations committed',
            'From queueing a ledger operation to the commit of the batch that carries it: what its caller waited for the ledger. Unlike commitLatencyMs, a batch counts once for each operation it carries',
          ),
        }),
        detail: doc('Group-commit writer counters of this instance', 'Operations per transaction is committedOperations / committedBatches; benchmarks read it.'),
      },
    )
    .post('/accounts/:id/freeze', ({ params }) => setStatus(params.id, 'frozen'), {
      params: IdParams,
      response: AccountStatus,
      detail: doc('Freeze an account', 'A frozen account cannot send (account_frozen): no transfers, holds or captures from it. It can still receive.'),
    })
    .post('/accounts/:id/unfreeze', ({ params }) => setStatus(params.id, 'active'), {
      params: IdParams,
      response: AccountStatus,
      detail: doc('Unfreeze an account'),
    })
}

/** The event loop's lateness after `lagSince` (wall-clock milliseconds since the Unix epoch), rounded to 0.01 ms. */
function lagSinceMs(deps: Pick<LedgerOpsDeps, 'loopLag'>, lagSince: number): number {
  if (!Number.isFinite(lagSince) || lagSince < 0) throw invalid('lagSince', 'lagSince must be a moment on the wall clock: milliseconds since the Unix epoch, 0 or more')
  return roundTo(deps.loopLag.lateSinceMs(lagSince - performance.timeOrigin), 2)
}
