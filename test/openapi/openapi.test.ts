import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Validator } from '@seriousme/openapi-schema-validator'
import { startTestApp, type TestApp } from '../support/app.ts'

let app: TestApp
let document: any

/** Routes that serve the documentation itself, or exist for load balancers, not partners. */
const UNDOCUMENTED_PATHS = new Set(['/docs', '/docs/api-reference.js', '/openapi.json', '/health'])
const UNDOCUMENTED_METHODS = new Set(['HEAD', 'OPTIONS'])
const OPERATION_METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const

beforeAll(async () => {
  app = await startTestApp()
  const response = await app.call('GET', '/openapi.json')
  expect(response.status).toBe(200)
  document = response.body
})
afterAll(async () => {
  await app.close()
})

async function validate(candidate: unknown) {
  const validator = new Validator()
  const result = await validator.validate(candidate as Record<string, unknown>)
  return { ...result, version: validator.version }
}

function operations(): Array<{ path: string; method: string; operation: any }> {
  const found: Array<{ path: string; method: string; operation: any }> = []
  for (const [path, item] of Object.entries<any>(document.paths)) {
    for (const method of OPERATION_METHODS) if (item[method]) found.push({ path, method, operation: item[method] })
  }
  return found
}

describe('the OpenAPI document', () => {
  test('is a valid OpenAPI 3.1 document by an independent validator', async () => {
    expect(document.openapi).toBe('3.1.0')
    const result = await validate(document)
    expect(result.errors).toBeUndefined()
    expect(result.valid).toBe(true)
    expect(result.version).toBe('3.1')
  })

  test('the validator does reject a broken copy, so the check above can fail', async () => {
    const broken = structuredClone(document)
    const first = operations()[0]!
    // 3.1 requires a description on every Response Object.
    delete broken.paths[first.path][first.method].responses.default.description
    expect((await validate(broken)).valid).toBe(false)
  })

  test('documents every route of the app with its method', () => {
    const routes = (app.kassa.app.routes as Array<{ method: string; path: string }>).filter(
      (route) => !UNDOCUMENTED_PATHS.has(route.path) && !UNDOCUMENTED_METHODS.has(route.method),
    )
    expect(routes.length).toBeGreaterThan(10)
    const missing = routes
      .map((route) => ({ method: route.method.toLowerCase(), path: route.path.replace(/:(\w+)/g, '{$1}') }))
      .filter((route) => document.paths[route.path]?.[route.method] === undefined)
      .map((route) => `${route.method.toUpperCase()} ${route.path}`)
    expect(missing).toEqual([])
  })

  test('documents no operation the app does not serve', () => {
    const served = new Set(
      (app.kassa.app.routes as Array<{ method: string; path: string }>).map(
        (route) => `${route.method.toLowerCase()} ${route.path.replace(/:(\w+)/g, '{$1}')}`,
      ),
    )
    const extra = operations()
      .map(({ path, method }) => `${method} ${path}`)
      .filter((entry) => !served.has(entry))
    expect(extra).toEqual([])
  })

  test('has the Error schema, and every operation answers it for failures', () => {
    const error = document.components.schemas.Error
    expect(error.type).toBe('object')
    expect(error.properties.error.required).toEqual(expect.arrayContaining(['code', 'message', 'requestId']))
    expect(error.properties.error.properties.code.anyOf.map((choice: { const: string }) => choice.const)).toEqual(
      expect.arrayContaining(['invalid_request', 'authentication_error', 'not_found', 'rate_limited', 'internal']),
    )
    const withoutError = operations()
      .filter(({ operation }) => operation.responses?.default?.content?.['application/json']?.schema?.$ref !== '#/components/schemas/Error')
      .map(({ method, path }) => `${method} ${path}`)
    expect(withoutError).toEqual([])
  })

  test('keeps the success bodies next to the error body', () => {
    const mint = document.paths['/v1/accounts'].post
    expect(Object.keys(mint.responses).sort()).toEqual(['200', '201', 'default'])
    expect(mint.responses['201'].content['application/json'].schema.properties.externalId).toBeDefined()
    const read = document.paths['/v1/accounts/{id}'].get
    expect(read.responses['200'].content['application/json'].schema.required).toContain('kyc')
  })

  test('documents only JSON request bodies, since the server accepts nothing else', () => {
    const mediaTypes = new Set<string>()
    for (const { operation } of operations()) {
      for (const mediaType of Object.keys(operation.requestBody?.content ?? {})) mediaTypes.add(mediaType)
      for (const response of Object.values<any>(operation.responses)) {
        for (const mediaType of Object.keys(response.content ?? {})) mediaTypes.add(mediaType)
      }
    }
    expect([...mediaTypes]).toEqual(['application/json'])
  })

  test('documents the rate-limit headers on /v1 answers', () => {
    const list = document.paths['/v1/accounts'].get
    expect(Object.keys(list.responses['200'].headers)).toEqual(expect.arrayContaining(['X-RateLimit-Limit', 'X-RateLimit-Remaining']))
    expect(document.components.headers['X-RateLimit-Limit']).toBeDefined()
  })

  test('is the same on a second fetch (the rewrite does not pile up)', async () => {
    const again = await app.call('GET', '/openapi.json')
    expect(again.body).toEqual(document)
  })
})

describe('/docs', () => {
  test('serves an HTML page that loads /openapi.json', async () => {
    const response = await app.call('GET', '/docs')
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toContain('text/html')
    expect(String(response.body)).toMatch(/<html/i)
    expect(String(response.body)).toContain('openapi.json')
  })

  test('loads its viewer from this server, nothing from another host, so it works offline', async () => {
    const page = String((await app.call('GET', '/docs')).body)
    const sources = [...page.matchAll(/<(?:script|link)\b[^>]*\b(?:src|href)="([^"]*)"/gi)].map((match) => match[1]!)
    expect(sources).toEqual(['/docs/api-reference.js'])
    expect(page).not.toMatch(/https?:\/\//)
    const viewer = await app.kassa.handle(new Request('http://kassa.test/docs/api-reference.js'))
    expect(viewer.status).toBe(200)
    expect(viewer.headers.get('content-type')).toContain('javascript')
    const script = await viewer.text()
    // The viewer's standalone bundle: it mounts on the page's #api-reference script element.
    expect(script.length).toBeGreaterThan(1_000_000)
    expect(script).toContain('api-reference')
    expect(script).not.toMatch(/import\(["'`]\.\/chunks\//)
  })
})
