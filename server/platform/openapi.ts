import { dirname, join } from 'node:path'
import { swagger } from '@elysiajs/swagger'
import { Elysia } from 'elysia'
import { ERROR_STATUS } from '../lib/errors.ts'
import { ErrorBody } from './errors.ts'

const errorContent = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } }

/**
 * Route documentation: a summary, a tag and the security the route needs. It carries no
 * `responses`: the swagger plugin spreads `detail` over the responses it builds from the route's
 * `response` schemas, so any here would erase the success bodies. The one error body is added to
 * every operation when the document is served (see `toOpenApi31`).
 */
export function apiDoc(summary: string, tag: string, options: { description?: string; security?: 'key' | 'public' | 'operator' } = {}) {
  const security = options.security ?? 'key'
  return {
    summary,
    tags: [tag],
    ...(options.description ? { description: options.description } : {}),
    security:
      security === 'public' ? [{}, { bearerAuth: [] }, { apiKeyHeader: [] }] : security === 'operator' ? [{ operatorToken: [] }] : [{ bearerAuth: [] }, { apiKeyHeader: [] }],
  } as Record<string, unknown>
}

const OPENAPI_PATH = '/openapi.json'
const JSON_MEDIA_TYPE = 'application/json'
const HTTP_METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'])
/** The fields OpenAPI 3.1 allows on a Response Object (besides `x-` extensions). */
const RESPONSE_OBJECT_FIELDS = new Set(['description', 'headers', 'content', 'links'])
const STATUS_DESCRIPTIONS: Record<string, string> = { '200': 'OK', '201': 'Created', '202': 'Accepted', '204': 'No Content' }

type JsonObject = Record<string, unknown>

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** Every body in and out is JSON (the body plugin refuses anything else), so only JSON is documented. */
function onlyJson(content: unknown): JsonObject | undefined {
  if (!isObject(content) || content[JSON_MEDIA_TYPE] === undefined) return undefined
  return { [JSON_MEDIA_TYPE]: content[JSON_MEDIA_TYPE] }
}

/**
 * The plugin copies a response schema's own keywords (`title`, `examples`, …) onto the Response
 * Object and leaves out `description` when the schema has none; 3.1 forbids the first and
 * requires the second.
 */
function toResponseObject(status: string, response: unknown, path: string): JsonObject {
  const source = isObject(response) ? response : {}
  const result: JsonObject = {}
  for (const [name, value] of Object.entries(source)) {
    if (RESPONSE_OBJECT_FIELDS.has(name) || name.startsWith('x-')) result[name] = value
  }
  if (typeof result.description !== 'string' || result.description === '') {
    result.description = STATUS_DESCRIPTIONS[status] ?? (status === 'default' ? 'An error, in the one error body' : 'Response')
  }
  const content = onlyJson(result.content)
  if (content === undefined) delete result.content
  else result.content = content
  result.headers = { ...responseHeaders(path), ...(isObject(result.headers) ? result.headers : {}) }
  return result
}

function responseHeaders(path: string): JsonObject {
  const headers: JsonObject = { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' } }
  if (path === '/v1' || path.startsWith('/v1/')) {
    headers['X-RateLimit-Limit'] = { $ref: '#/components/headers/X-RateLimit-Limit' }
    headers['X-RateLimit-Remaining'] = { $ref: '#/components/headers/X-RateLimit-Remaining' }
  }
  return headers
}

function normalizeOperation(path: string, operation: JsonObject): void {
  const responses: JsonObject = {}
  for (const [status, response] of Object.entries(isObject(operation.responses) ? operation.responses : {})) {
    responses[status] = toResponseObject(status, response, path)
  }
  responses.default ??= toResponseObject('default', { content: errorContent }, path)
  operation.responses = responses
  if (isObject(operation.requestBody)) {
    const content = onlyJson(operation.requestBody.content)
    if (content === undefined) delete operation.requestBody
    else operation.requestBody = { ...operation.requestBody, content }
  }
}

/**
 * Turns what the swagger plugin serves into a valid OpenAPI 3.1 document: JSON bodies only,
 * Response Objects with only the fields 3.1 allows, and the one error body on every operation.
 * The plugin keeps and reuses its objects between calls, so this works on a copy; the JSON round
 * trip also drops TypeBox's symbol keys and undefined values.
 */
export function toOpenApi31(served: unknown): JsonObject {
  const document = JSON.parse(JSON.stringify(served)) as JsonObject
  document.openapi = '3.1.0'
  const paths = isObject(document.paths) ? document.paths : {}
  for (const [path, item] of Object.entries(paths)) {
    if (!isObject(item)) continue
    for (const [method, operation] of Object.entries(item)) {
      if (HTTP_METHODS.has(method) && isObject(operation)) normalizeOperation(path, operation)
    }
  }
  return document
}

const errorTable = Object.entries(ERROR_STATUS)
  .map(([code, status]) => `| \`${code}\` | ${status} |`)
  .join('\n')

const description = `Organization-scoped financial API. Every resource belongs to the organization of the API key.

## Errors
Every failure answers the same body: \`{ "error": { "code", "message", "field"?, "requestId" } }\`, with the
request id also in the \`X-Request-Id\` header. Status per code:

| code | HTTP |
|---|---|
${errorTable}

A body over the size limit answers 413 with \`invalid_request\`. On every route, a body nested deeper than 32
levels, a string or key holding U+0000 or an unpaired UTF-16 surrogate, bytes that are not UTF-8, and the
keys \`__proto__\`, \`constructor\` and \`prototype\` answer 400 \`invalid_request\` naming the field; a path id
holding such characters answers 404 (docs/hardening.md).

## Idempotency
Send \`Idempotency-Key\` (1 to 255 visible ASCII characters, else 400 naming the header on every route) on any POST, PATCH, PUT or DELETE. Keys are scoped to
the organization and kept 24 hours. A retry with the same key and body replays the first answer (status
and body) with the header \`Idempotent-Replayed: true\`; the same key with a different body is 409
\`idempotency_conflict\` naming the differing fields; a retry while the first is still running is 409
\`idempotency_in_progress\`. Requests refused as \`invalid_request\` are not saved. Public reads without a key
are never deduplicated.

Exactly once across a crash: every request that moves money (transfers, holds and their capture and
release, payment authorization, capture and void, withdrawals, sandbox funding) commits its key's record,
with its answer, in the same database transaction as its effect. A retry after any failure, a crash of the
server included, either gets the original answer (same status, body and \`Content-Type\`; only
\`Idempotent-Replayed\`, \`X-Request-Id\`, the rate headers and \`Date\` differ) or, if the first attempt never
committed, runs once. A key left in progress by a server process that is gone is settled at once. Operators'
creating calls (\`POST /ops/v1/orgs\`, key issue and rotation) honour the header too, with keys scoped to the
operator. See docs/idempotency.md.

## Rate limits
Fixed 60-second windows, exact across instances: 1000 per minute per secret or test key, 100 per
publishable key, 30 per source IP without a key. Every \`/v1\` response carries \`X-RateLimit-Limit\` and
\`X-RateLimit-Remaining\`; a 429 carries \`Retry-After\` (seconds). Past an instance's capacity,
\`POST /v1/payments/authorize\` may also answer 429 \`rate_limited\` (\`Retry-After: 1\`) when the instance
sheds load: refused before the request is read past its key, nothing authorized or recorded, an \`Idempotency-Key\` not
used up, so the same request can be sent again; such a refusal has no rate headers and is not counted against the key's limit.
`

/** Where /docs loads its viewer from: this server, never a CDN, so the page works offline. */
export const DOCS_VIEWER_PATH = '/docs/api-reference.js'

/**
 * The viewer's standalone browser bundle, from the installed @scalar/api-reference package (its
 * version pinned in package.json). It is one self-contained script: no chunk or stylesheet is
 * fetched after it.
 */
function docsViewerFile(): string {
  const entry = Bun.resolveSync('@scalar/api-reference', import.meta.dir)
  return join(dirname(entry), 'browser', 'standalone.js')
}

/**
 * The OpenAPI document at /openapi.json and an interactive page at /docs. The plugin's default
 * version string is 3.0.3; TypeBox emits JSON Schema, which is what OpenAPI 3.1 speaks, so the
 * document is declared 3.1.0 and a test validates it with an independent 3.1 validator.
 */
export function openapiPlugin() {
  const plugin = swagger({
    path: '/docs',
    specPath: OPENAPI_PATH,
    exclude: ['/docs', OPENAPI_PATH, DOCS_VIEWER_PATH],
    scalarCDN: DOCS_VIEWER_PATH,
    // The viewer's default fonts come from its vendor's servers; the system's fonts serve offline.
    scalarConfig: { withDefaultFonts: false } as never,
    // The plugin leaves out every path with a dot (static files by its guess); the only such route
    // is /.well-known/jwks.json, which is part of the API.
    excludeStaticFile: false,
    documentation: {
      openapi: '3.1.0',
      info: { title: 'Kassa API', version: '1.0.0', description },
      tags: [
        { name: 'Accounts', description: 'Accounts of your end users, keyed by your externalId' },
        { name: 'KYC', description: 'Signed attestations instead of personal documents' },
        { name: 'Catalog', description: 'Public reads' },
        { name: 'Sandbox', description: 'Test helpers; sandbox only' },
        { name: 'Operators', description: 'The operator API (/ops/v1), authenticated by the operator token' },
      ],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key>' },
          apiKeyHeader: { type: 'apiKey', in: 'header', name: 'x-api-key' },
          operatorToken: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <OPERATOR_TOKEN>' },
        },
        headers: {
          'X-Request-Id': { description: 'The request id, also in every error body', schema: { type: 'string' } },
          'X-RateLimit-Limit': { description: 'Requests allowed in the current 60-second window', schema: { type: 'integer' } },
          'X-RateLimit-Remaining': { description: 'Requests left in the current 60-second window', schema: { type: 'integer' } },
        },
        schemas: { Error: ErrorBody as never },
      },
    } as never,
  })
  // A hook registered before `use` runs for the plugin's routes: the served document is rewritten
  // on its way out, and the plugin's own HTML page at /docs passes through untouched.
  const viewer = Bun.file(docsViewerFile())
  return new Elysia({ name: 'kassa/openapi' })
    .onAfterHandle(({ path, response }) => (path === OPENAPI_PATH ? toOpenApi31(response) : undefined))
    .use(plugin)
    .get(
      DOCS_VIEWER_PATH,
      () => new Response(viewer, { headers: { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'public, max-age=3600' } }),
      { detail: { hide: true } },
    )
}
