import { Elysia, t } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import {
  Account,
  AccountList,
  AttestationKey,
  CreateAccountBody,
  CreateAttestationKeyBody,
  KycBody,
  ListAccountsQuery,
} from './model.ts'
import * as service from './service.ts'
import type { AccountsContext } from './service.ts'

export function accountsRoutes(accounts: AccountsContext, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/accounts', prefix: '/v1' })
    .use(access)
    .post(
      '/accounts',
      async ({ body, principal, set }) => {
        const { account, created } = await service.mintAccount(accounts, principal.orgId, body)
        set.status = created ? 201 : 200
        return account
      },
      {
        access: 'secret',
        body: CreateAccountBody,
        response: { 200: Account, 201: Account },
        detail: apiDoc('Mint an account by externalId', 'Accounts', {
          description: 'Answers 201 with a new account, or 200 with the existing one when this externalId was minted before.',
        }),
      },
    )
    .get('/accounts', ({ query, principal }) => service.listAccounts(accounts, principal.orgId, query), {
      access: 'secret',
      query: ListAccountsQuery,
      response: AccountList,
      detail: apiDoc('List accounts, or find one by externalId', 'Accounts', {
        description: 'Ordered by creation. Pass the last id of a page as `after` for the next page.',
      }),
    })
    .get('/accounts/:id', ({ params, principal }) => service.getAccount(accounts, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: Account,
      detail: apiDoc('Read an account', 'Accounts'),
    })
    .post('/accounts/:id/kyc', ({ params, body, principal }) => service.attachKyc(accounts, principal.orgId, params.id, body.attestation), {
      access: 'secret',
      params: IdParams,
      body: KycBody,
      response: Account,
      detail: apiDoc('Attach a signed KYC attestation', 'KYC', {
        description:
          'The attestation is a compact JWS signed (EdDSA) by one of your attestation keys, with claims sub (account id or externalId), level (string) and exp. A bad signature, wrong subject or expired attestation is invalid_request.',
      }),
    })
    .post(
      '/attestation-keys',
      async ({ body, principal, set }) => {
        set.status = 201
        return service.registerAttestationKey(accounts, principal.orgId, body.publicKey)
      },
      {
        access: 'secret',
        body: CreateAttestationKeyBody,
        response: { 201: AttestationKey },
        detail: apiDoc('Register an Ed25519 attestation key', 'KYC'),
      },
    )
    .get('/attestation-keys', async ({ principal }) => ({ attestationKeys: await service.listAttestationKeys(accounts, principal.orgId) }), {
      access: 'secret',
      response: t.Object({ attestationKeys: t.Array(AttestationKey) }),
      detail: apiDoc('List attestation keys', 'KYC'),
    })
    .delete('/attestation-keys/:id', ({ params, principal }) => service.revokeAttestationKey(accounts, principal.orgId, params.id), {
      access: 'secret',
      params: IdParams,
      response: AttestationKey,
      detail: apiDoc('Revoke an attestation key', 'KYC', { description: 'Attestations already accepted stay recorded.' }),
    })
}
