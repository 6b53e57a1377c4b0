import { Elysia, t } from 'elysia'
import { IdParams } from '../../lib/params.ts'
import type { AccessPlugin } from '../../platform/access.ts'
import { apiDoc } from '../../platform/openapi.ts'
import { BusinessDay, BusinessDayBody, Jwks, ListStatementsQuery, SigningKey, Statement, StatementFormatQuery, StatementList, type StatementView } from './model.ts'
import { formatOf, type StatementsService } from './service.ts'
import type { StatementKeyRing } from './signing.ts'

const TAG = 'Statements'

const STATEMENT_DOC =
  'Sealed daily statements of an account in one asset, cut at the organization business-date cut-off (a time zone and an hour, UTC 00:00 unless set). ' +
  "A movement belongs to the business date its booking time (the ledger's created time, on the organization clock) falls in; one that commits only after its date was sealed is stated on the next statement. " +
  'Statements are immutable (the database refuses any change), chained by previousHash and signed (Ed25519 JWS, keys at GET /.well-known/jwks.json). See docs/statements.md.'

export function statementsRoutes(service: StatementsService, access: AccessPlugin) {
  return new Elysia({ name: 'kassa/statements', prefix: '/v1' })
    .use(access)
    .get('/accounts/:id/statements', ({ params, query, principal }) => service.list(principal.orgId, params.id, query), {
      access: 'secret',
      params: IdParams,
      query: ListStatementsQuery,
      response: StatementList,
      detail: apiDoc("List an account's statements", TAG, {
        description: `${STATEMENT_DOC} Oldest business date first (then asset); filter by asset and by an inclusive date range from/to (YYYY-MM-DD); pass the last id of a page as after for the next. limit is 1 to 200 (default 50). The answer is what the offline verifier takes.`,
      }),
    })
    .get(
      '/statements/:id',
      async ({ params, query, principal, request }) => {
        const format = formatOf(query.format, request.headers.get('accept'))
        if (format === 'json') return service.get(principal.orgId, params.id)
        const rendered = await service.render(principal.orgId, params.id, format)
        // A CSV or PDF answer is sent as it is; the schema documents (and checks) the JSON form only.
        return new Response(rendered.body, {
          headers: { 'content-type': rendered.contentType, 'content-disposition': `inline; filename="${rendered.filename}"` },
        }) as unknown as StatementView
      },
      {
        access: 'secret',
        params: IdParams,
        query: StatementFormatQuery,
        response: Statement,
        detail: apiDoc('Read a statement (JSON, CSV or PDF)', TAG, {
          description: `${STATEMENT_DOC} JSON by default; Accept: text/csv answers CSV (one row per line between an opening and a closing row), Accept: application/pdf a printable PDF; ?format=json|csv|pdf overrides the Accept header.`,
        }),
      },
    )
}

/** The public keys that verify statement signatures: every key ever used, the current one last. */
export function jwksRoutes(keys: StatementKeyRing) {
  return new Elysia({ name: 'kassa/jwks' }).get(
    '/.well-known/jwks.json',
    ({ set }) => {
      set.headers['cache-control'] = 'public, max-age=300'
      return keys.jwks()
    },
    {
      response: Jwks,
      detail: apiDoc('Statement signing keys (JWKS)', TAG, {
        security: 'public',
        description: 'Readable without a key. Ed25519 public keys (OKP, alg EdDSA); a rotation adds a key and never removes one, so every statement ever signed keeps verifying.',
      }),
    },
  )
}

const OrgParams = t.Object({ orgId: t.String({ maxLength: 64 }) })
const opsDoc = (summary: string, description?: string) => apiDoc(summary, 'Operators', { security: 'operator', description })

export function statementsOpsRoutes(service: StatementsService, keys: StatementKeyRing) {
  return new Elysia({ name: 'kassa/ops-statements', prefix: '/ops/v1' })
    .get('/orgs/:orgId/business-day', ({ params }) => service.businessDay(params.orgId), {
      params: OrgParams,
      response: BusinessDay,
      detail: opsDoc("Read an organization's business day (time zone and cut-off hour)"),
    })
    .put('/orgs/:orgId/business-day', ({ params, body }) => service.setBusinessDay(params.orgId, body), {
      params: OrgParams,
      body: BusinessDayBody,
      response: BusinessDay,
      detail: opsDoc(
        "Set an organization's business day",
        'timeZone is an IANA zone, cutoffHour 0 to 23 (0: midnight at the end of the date). Applies from the next date to be sealed; sealed dates keep theirs, and the next period starts where the last sealed one ended. Daylight-saving days last 23 or 25 hours; a cut-off hour skipped by a jump forward falls at the end of the jump.',
      ),
    })
    .get('/statement-keys', () => ({ keys: keys.list() }), {
      response: t.Object({ keys: t.Array(SigningKey) }),
      detail: opsDoc('List the statement signing keys'),
    })
    .post(
      '/statement-keys/rotate',
      async ({ set }) => {
        set.status = 201
        const rotated = await keys.rotate()
        return { kid: rotated.kid, createdAt: rotated.createdAt, current: true }
      },
      {
        response: { 201: SigningKey },
        detail: opsDoc('Rotate the statement signing key', 'Adds a new Ed25519 key that signs every statement sealed from now on; earlier keys stay in the JWKS.'),
      },
    )
}
