import { Elysia, t } from 'elysia'
import { ApiError } from '../../lib/errors.ts'
import { formatAmount } from '../../lib/money.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { findAsset } from '../../lib/assets.ts'
import { ArrivalBody, ChainArrival, type ArrivalInput, type ChainArrivalView } from '../deposits/model.ts'
import { requireTestKey } from '../sandbox/routes.ts'
import type { ChainWithdrawalRecord, SandboxChain } from './simulator.ts'

const WithdrawalParams = t.Object({ withdrawalId: t.String({ maxLength: 64 }) })
const ArrivalParams = t.Object({ id: t.String({ maxLength: 64 }) })
const FailBody = t.Object({ reason: t.Optional(t.String({ minLength: 1, maxLength: 200 })) }, { additionalProperties: false })

const ChainWithdrawal = t.Object(
  {
    withdrawalId: t.String(),
    network: t.Union([t.Literal('sui'), t.Literal('tron')]),
    asset: t.String(),
    toAddress: t.String(),
    amount: t.String(),
    txHash: t.String(),
    block: t.String(),
    confirmationsRequired: t.Integer(),
    state: t.Union([t.Literal('submitted'), t.Literal('completed'), t.Literal('failed')]),
    failureReason: t.Union([t.String(), t.Null()]),
    submittedAt: t.String({ format: 'date-time' }),
    finalAt: t.String({ format: 'date-time' }),
  },
  { title: 'SandboxChainWithdrawal' },
)

function toChainWithdrawalView(row: ChainWithdrawalRecord) {
  return {
    withdrawalId: row.withdrawalId,
    network: row.network,
    asset: row.asset,
    toAddress: row.toAddress,
    amount: formatAmount(row.amount, findAsset(row.asset)?.decimals ?? 0),
    txHash: row.txHash,
    block: row.block,
    confirmationsRequired: row.confirmationsRequired,
    state: row.state,
    failureReason: row.failureReason,
    submittedAt: row.submittedAt.toISOString(),
    finalAt: row.finalAt.toISOString(),
  }
}

/** What the simulator's arrival routes call: the deposits module records and reads arrivals. */
export interface ArrivalsReporter {
  observe(orgId: string, input: ArrivalInput): Promise<{ arrival: ChainArrivalView; created: boolean }>
  get(orgId: string | undefined, id: string): Promise<ChainArrivalView>
}

interface SandboxChainRoutesDeps {
  /** Undefined where another adapter runs: its withdrawal routes answer not_found. */
  simulator: SandboxChain | undefined
  arrivals: ArrivalsReporter
}

function requireSimulator(simulator: SandboxChain | undefined): SandboxChain {
  if (!simulator) throw new ApiError('not_found', 'This server does not run the sandbox chain')
  return simulator
}

/** The sandbox chain simulator, driven by test keys. Registered only in sandbox, so production answers 404. */
export function sandboxChainRoutes({ simulator, arrivals }: SandboxChainRoutesDeps, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/sandbox-chain', prefix: '/v1/sandbox/chain' })
    .use(access)
    .post(
      '/arrivals',
      async ({ body, principal, set }) => {
        requireTestKey(principal)
        const { arrival, created } = await arrivals.observe(principal.orgId, body)
        set.status = created ? 201 : 200
        return arrival
      },
      {
        access: 'secret',
        body: ArrivalBody,
        response: { 200: ChainArrival, 201: ChainArrival },
        detail: apiDoc('Simulate an arrival on chain', 'Sandbox', {
          description:
            "Test keys only. The same (network, txHash, address) is one arrival however often it is posted: 201 the first time, 200 with the same arrival after (409 conflict if amount or asset differ). " +
            "At a deposit address of the organization it is in flight on the account at once and available at finality: Sui after 1 checkpoint (0.5 s), Tron after 19 blocks (3 s each) on the organization's clock. " +
            'Anywhere else it waits in suspense for an operator (/ops/v1/suspense).',
        }),
      },
    )
    .get(
      '/arrivals/:id',
      ({ params, principal }) => {
        requireTestKey(principal)
        return arrivals.get(principal.orgId, params.id)
      },
      { access: 'secret', params: ArrivalParams, response: ChainArrival, detail: apiDoc('Read a simulated arrival', 'Sandbox', { description: 'Test keys only.' }) },
    )
    .get(
      '/withdrawals/:withdrawalId',
      async ({ params, principal }) => {
        requireTestKey(principal)
        const row = await requireSimulator(simulator).findWithdrawal(principal.orgId, params.withdrawalId)
        if (!row) throw new ApiError('not_found', 'No such withdrawal on the sandbox chain (it is sent after approval)')
        return toChainWithdrawalView(row)
      },
      {
        access: 'secret',
        params: WithdrawalParams,
        response: ChainWithdrawal,
        detail: apiDoc("Read a withdrawal's transaction on the sandbox chain", 'Sandbox', { description: 'Test keys only.' }),
      },
    )
    .post(
      '/withdrawals/:withdrawalId/fail',
      async ({ params, body, principal }) => {
        requireTestKey(principal)
        return toChainWithdrawalView(await requireSimulator(simulator).failWithdrawal(principal.orgId, params.withdrawalId, body.reason ?? 'failed on the sandbox chain'))
      },
      {
        access: 'secret',
        params: WithdrawalParams,
        body: FailBody,
        response: ChainWithdrawal,
        detail: apiDoc('Make a sent withdrawal fail on the sandbox chain', 'Sandbox', {
          description:
            "Test keys only. Takes effect only before finality: at the withdrawal's finality time it fails instead of completing. not_found before it is sent; conflict once final or already failing.",
        }),
      },
    )
}
