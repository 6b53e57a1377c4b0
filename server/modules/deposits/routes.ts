import { Elysia } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { type IdempotencyStore } from '../../platform/idempotency.ts'
import { OPERATOR_SCOPE, runWithAnswerInCommit } from '../../platform/idempotency-in-commit.ts'
import { apiDoc } from '../../platform/openapi.ts'
import {
  AddressParams,
  AssignSuspenseBody,
  ChainArrival,
  CreateDepositAddressBody,
  CreateDepositBody,
  Deposit,
  DepositAddress,
  DepositAddressList,
  DepositList,
  ListDepositsQuery,
  ListQuery,
  ListSuspenseQuery,
  ReturnSuspenseBody,
  SuspenseList,
} from './model.ts'
import { createDepositAddress, listDepositAddresses, retireDepositAddress } from './addresses.ts'
import type { DepositsContext } from './context.ts'
import { createDeposit, getDeposit, listDeposits } from './declared.ts'
import { assignSuspense, getSuspense, listSuspense, returnSuspense } from './suspense.ts'

export function depositsRoutes(deposits: DepositsContext, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/deposits', prefix: '/v1' })
    .use(access)
    .post(
      '/deposits',
      (context) => context.answerInCommit(context, 201, () => createDeposit(deposits, context.principal.orgId, context.body)),
      {
        access: { level: 'secret', idempotency: 'commit' },
        body: CreateDepositBody,
        response: { 201: Deposit },
        detail: apiDoc('Declare a deposit', 'Deposits', {
          description:
            "Answers funding instructions: the account's deposit address on the asset's network (created if it has none), the amount and an expiry 24 h ahead on the organization's clock. " +
            'Matching: an arrival at that address within the expiry completes the oldest open declared deposit of exactly its amount, else the oldest open one (amountMatch under or over). ' +
            'The received amount is what is credited: inFlight from observation, available at finality (Sui 1 checkpoint, Tron 19 blocks), with funding.deposit.confirmed (intentId = the deposit\'s intentId, digest = the transaction hash; funding deposits do not use transaction.deposit.*, which are the events of vault deposit intents). ' +
            'States: awaiting_funds → confirming → completed; expired when nothing arrived in time (a later arrival still credits, as a deposit_address deposit).',
        }),
      },
    )
    .get('/deposits', ({ query, principal }) => listDeposits(deposits, principal.orgId, query), {
      access: 'secret',
      query: ListDepositsQuery,
      response: DepositList,
      detail: apiDoc('List deposits', 'Deposits', {
        description: 'Declared deposits and those created by arrivals at deposit addresses or by operators assigning suspense arrivals. Ordered by creation; pass the last id as `after` for the next page.',
      }),
    })
    .get('/deposits/:id', ({ params, principal }) => getDeposit(deposits, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Deposit,
      detail: apiDoc('Read a deposit', 'Deposits'),
    })
    .post(
      '/accounts/:id/deposit-addresses',
      async ({ params, body, principal, set }) => {
        const { address, created } = await createDepositAddress(deposits, principal.orgId, params.id, body)
        set.status = created ? 201 : 200
        return address
      },
      {
        access: 'secret',
        params: IdParams,
        body: CreateDepositAddressBody,
        response: { 200: DepositAddress, 201: DepositAddress },
        detail: apiDoc('Create a deposit address', 'Deposits', {
          description:
            'One active address per (account, asset, network): 201 with a new address, 200 with the existing one. Addresses are real addresses of their network derived deterministically from the configured key material. ' +
            'Every arrival at one credits the account automatically (a deposit with source deposit_address).',
        }),
      },
    )
    .get('/accounts/:id/deposit-addresses', ({ params, query, principal }) => listDepositAddresses(deposits, principal.orgId, params.id, query), {
      access: 'secret',
      params: IdParams,
      query: ListQuery,
      response: DepositAddressList,
      detail: apiDoc("List an account's deposit addresses", 'Deposits', { description: 'Active and retired, ordered by creation.' }),
    })
    .post(
      '/accounts/:id/deposit-addresses/:addressId/retire',
      ({ params, principal }) => retireDepositAddress(deposits, principal.orgId, params.id, params.addressId),
      {
        access: 'secret',
        params: AddressParams,
        response: DepositAddress,
        detail: apiDoc('Retire a deposit address', 'Deposits', {
          description: 'The address is no longer handed out (the next create derives a new one) but stays watched forever: arrivals at it still credit the account. Retiring a retired address answers it unchanged.',
        }),
      },
    )
}

const opsDoc = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

/**
 * Suspense: arrivals that matched no deposit address of their organization, for operators to assign
 * or return. Assigning and returning move money: their Idempotency-Key (in the operators' scope)
 * commits with the movement.
 */
export function suspenseOpsRoutes(deposits: DepositsContext, idempotency: IdempotencyStore) {
  return new Elysia({ name: 'kassa/ops-suspense', prefix: '/ops/v1' })
    .get('/suspense', ({ query }) => listSuspense(deposits, query), {
      query: ListSuspenseQuery,
      response: SuspenseList,
      detail: opsDoc('List suspense arrivals', 'Arrivals that matched nothing (disposition suspense: waiting; assigned; returned), all organizations or one (orgId). A suspense arrival is credited to no account.'),
    })
    .get('/suspense/:id', ({ params }) => getSuspense(deposits, params.id), {
      params: IdParams,
      response: ChainArrival,
      detail: opsDoc('Read a suspense arrival'),
    })
    .post('/suspense/:id/assign', (context) => runWithAnswerInCommit(idempotency, { ...context, orgId: OPERATOR_SCOPE }, 200, () => assignSuspense(deposits, context.params.id, context.body)), {
      params: IdParams,
      body: AssignSuspenseBody,
      response: ChainArrival,
      detail: opsDoc(
        'Assign a suspense arrival to an account',
        "Once final, the amount moves from the organization's suspense account to the account's available balance as a completed deposit (source suspense_assignment), with funding.deposit.confirmed. conflict while confirming or once resolved. Honours Idempotency-Key (operators' scope), committed with the movement.",
      ),
    })
    .post('/suspense/:id/return', (context) => runWithAnswerInCommit(idempotency, { ...context, orgId: OPERATOR_SCOPE }, 200, () => returnSuspense(deposits, context.params.id, context.body)), {
      params: IdParams,
      body: ReturnSuspenseBody,
      response: ChainArrival,
      detail: opsDoc('Return a suspense arrival', 'Once final, the amount leaves suspense for chain clearing, to be paid back. conflict while confirming or once resolved. Honours Idempotency-Key (operators\' scope), committed with the movement.'),
    })
}
