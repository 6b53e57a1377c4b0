import { Elysia, t } from 'elysia'
import type { Database } from '../../../db/client.ts'
import { invalid, notFound } from '../../lib/errors.ts'
import type { UrlPolicy } from '../../lib/url-policy.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { FACT_PATTERN, setChainFact } from './chain-reader.ts'
import { farmableReport } from './credentials.ts'
import { applyImport, documentFromNdjson, ImportDocument } from './import.ts'
import { normalizeSuiAddress } from './sui.ts'
import type { SbtTokens } from './tokens.ts'

const doc = (summary: string, description?: string) => apiDoc(summary, 'SBT operators', { security: 'operator', description })

const Environment = t.Union([t.Literal('staging'), t.Literal('production')], { description: 'staging: the sandbox deployment; production: the production one' })

const TokenView = t.Object(
  {
    id: t.String(),
    environment: Environment,
    label: t.String(),
    createdAt: t.String({ format: 'date-time' }),
    revokedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
  },
  { title: 'SbtToken' },
)
const IssuedToken = t.Object(
  {
    id: t.String(),
    token: t.String({ description: 'Shown once; the server keeps only its SHA-256' }),
    environment: Environment,
    label: t.String(),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'SbtIssuedToken' },
)
const ImportSummary = t.Object(
  {
    campaigns: t.Integer(),
    groups: t.Integer(),
    credentials: t.Integer(),
    rewards: t.Integer(),
    users: t.Integer(),
    results: t.Integer(),
    clicks: t.Integer(),
    claims: t.Integer(),
    repeated: t.Boolean({ description: 'True when this very document was imported before (nothing written again)' }),
  },
  { title: 'SbtImportSummary' },
)
const FarmableReport = t.Object(
  {
    campaignId: t.String(),
    credentials: t.Array(t.Object({ id: t.String(), groupId: t.String(), labelType: t.Integer(), task: t.String(), family: t.String(), enforces: t.Boolean() })),
    farmableCredentialIds: t.Array(t.String()),
    rewards: t.Array(t.Object({ sbtId: t.Integer(), title: t.String(), groupId: t.String(), farmable: t.Boolean() })),
  },
  { title: 'SbtFarmableReport' },
)

export interface SbtOpsDeps {
  db: Database
  tokens: SbtTokens
  policy: UrlPolicy
  sandbox: boolean
}

/** The SBT operator API on the main listener, behind the operator token like the rest of /ops/v1. */
export function sbtOpsRoutes(deps: SbtOpsDeps) {
  let app = new Elysia({ name: 'kassa/ops-sbt', prefix: '/ops/v1/sbt' })
    .post(
      '/tokens',
      async ({ body, set }) => {
        set.status = 201
        return deps.tokens.issue(body.environment, body.label ?? '')
      },
      {
        body: t.Object({ environment: Environment, label: t.Optional(t.String({ maxLength: 200 })) }, { additionalProperties: false }),
        response: { 201: IssuedToken },
        detail: doc('Issue an SBT data API token', 'The token works only on the deployment of its environment (staging is the sandbox service, production the production one). Shown once.'),
      },
    )
    .get('/tokens', async () => ({ tokens: await deps.tokens.list() }), {
      response: t.Object({ tokens: t.Array(TokenView) }),
      detail: doc('List SBT data API tokens (never their secrets), newest first, at most 1,000'),
    })
    .post(
      '/tokens/:tokenId/revoke',
      async ({ params }) => {
        const revoked = await deps.tokens.revoke(params.tokenId)
        if (revoked === undefined) throw notFound('token')
        return revoked
      },
      { params: t.Object({ tokenId: t.String({ maxLength: 64 }) }), response: TokenView, detail: doc('Revoke an SBT data API token', 'Refused on this instance from the next request; on other instances within a second.') },
    )
    .post(
      '/import',
      async ({ body }) => {
        const { ndjson, ...document } = body
        if (ndjson !== undefined && Object.keys(document).length > 0) throw invalid('ndjson', 'send either ndjson or the document\'s arrays, not both')
        return applyImport(deps.db, ndjson === undefined ? document : documentFromNdjson(ndjson), deps.policy)
      },
      {
        body: t.Object(
          {
            ...ImportDocument.properties,
            ndjson: t.Optional(t.String({ description: 'Instead of the arrays: the same items as NDJSON, one per line, each with "type": campaign, group, credential, reward, user, result, click or claim' })),
          },
          { additionalProperties: false, title: 'SbtImport' },
        ),
        response: ImportSummary,
        detail: doc(
          'Import campaigns, credentials, rewards, users, invites, results, clicks and claim records',
          'Validated whole, then written in one transaction (all or nothing); upserts by id (users by address, claim records by user and SBT); results and clicks are appended. The same document again changes nothing (repeated: true).',
        ),
      },
    )
    .get(
      '/campaigns/:campaignId/farmable',
      async ({ params }) => {
        const report = await farmableReport(deps.db, params.campaignId)
        if (report === undefined) throw notFound('campaign')
        return report
      },
      {
        params: t.Object({ campaignId: t.String({ maxLength: 128 }) }),
        response: FarmableReport,
        detail: doc('Which credentials of a campaign enforce nothing', 'Click-to-verify (8, 12, 72), always-verified (20), wallet-connected (23, 24, 86, 102) and account-connected (73, 94) credentials prove nothing a user cannot fake; a reward whose group holds only such credentials is farmable.'),
      },
    )
  if (deps.sandbox) {
    app = app.put(
      '/sandbox/chain-facts',
      async ({ body }) => {
        if (!FACT_PATTERN.test(body.fact)) throw invalid('fact', 'fact must be letters, digits, : _ . - (up to 100)')
        if (!/^\d{1,40}$/.test(body.amount)) throw invalid('amount', 'amount must be a whole number')
        let address = body.address
        if (body.chain === 'sui') {
          try {
            address = normalizeSuiAddress(body.address)
          } catch {
            throw invalid('address', 'address must be a Sui address: 0x followed by 64 hex digits')
          }
        } else if (body.chain === 'evm' || body.chain === 'bsc') address = body.address.toLowerCase()
        await setChainFact(deps.db, body.chain, address, body.fact, BigInt(body.amount))
        return { chain: body.chain, address, fact: body.fact, amount: body.amount }
      },
      {
        body: t.Object(
          { chain: t.Union([t.Literal('sui'), t.Literal('ton'), t.Literal('bsc'), t.Literal('evm')]), address: t.String({ minLength: 1, maxLength: 100 }), fact: t.String({ maxLength: 100 }), amount: t.String({ maxLength: 40 }) },
          { additionalProperties: false },
        ),
        response: t.Object({ chain: t.String(), address: t.String(), fact: t.String(), amount: t.String() }),
        detail: doc('Set a fact on the sandbox chain (sandbox only)', 'What the on-chain verifiers read: a whole number per chain, address and fact (balance:USDC, txcount, sbt:12, …).'),
      },
    ) as unknown as typeof app
  }
  return app
}

