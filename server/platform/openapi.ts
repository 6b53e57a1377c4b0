import { swagger } from '@elysiajs/swagger'
import { ERROR_STATUS } from '../lib/errors.ts'
import { ErrorBody } from './errors.ts'

const errorContent = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } }

/**
 * Route documentation: a summary, a tag, and the one error body for every failure status, so the
 * OpenAPI document says what a client meets when something goes wrong.
 */
export function apiDoc(summary: string, tag: string, options: { description?: string; security?: 'key' | 'public' | 'operator' } = {}) {
  const security = options.security ?? 'key'
  return {
    summary,
    tags: [tag],
    ...(options.description ? { description: options.description } : {}),
    security:
      security === 'public' ? [{}, { bearerAuth: [] }, { apiKeyHeader: [] }] : security === 'operator' ? [{ operatorToken: [] }] : [{ bearerAuth: [] }, { apiKeyHeader: [] }],
    responses: {
      default: { description: 'An error, in the one error body', content: errorContent },
    },
  } as Record<string, unknown>
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

A body over the size limit answers 413 with \`invalid_request\`.

## Idempotency
Send \`Idempotency-Key\` (1 to 255 printable characters) on any POST, PATCH, PUT or DELETE. Keys are scoped to
the organization and kept 24 hours. A retry with the same key and body replays the first answer (status
and body) with the header \`Idempotent-Replayed: true\`; the same key with a different body is 409
\`idempotency_conflict\` naming the differing fields; a retry while the first is still running is 409
\`idempotency_in_progress\`. Requests refused as \`invalid_request\` are not saved. Public reads without a key
are never deduplicated.

## Rate limits
Fixed 60-second windows, exact across instances: 1000 per minute per secret or test key, 100 per
publishable key, 30 per source IP without a key. Every \`/v1\` response carries \`X-RateLimit-Limit\` and
\`X-RateLimit-Remaining\`; a 429 carries \`Retry-After\` (seconds).
`

/**
 * The OpenAPI document at /openapi.json and an interactive page at /docs. The plugin's default
 * version string is 3.0.3; TypeBox emits JSON Schema, which is what OpenAPI 3.1 speaks, so the
 * document is declared 3.1.0 and a test validates it with an independent 3.1 validator.
 */
export function openapiPlugin() {
  return swagger({
    path: '/docs',
    specPath: '/openapi.json',
    exclude: ['/docs', '/openapi.json'],
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
        schemas: { Error: ErrorBody as never },
      },
    } as never,
  })
}
