import { afterAll, beforeAll, expect, test } from 'bun:test'
import fc from 'fast-check'
import { startTestApp, type TestApp } from '../support/app.ts'
import { expectVerified, ledgerFixture, type LedgerFixture } from '../ledger/support.ts'

/**
 * Hostile requests against every write route of the OpenAPI document: bodies shaped after each
 * route's schema with hostile values in its fields (or no schema at all: raw text, deep nesting,
 * bytes that are not UTF-8), hostile path ids and Idempotency-Keys. Never a 5xx; the ledger
 * verifies afterwards; another organization's transfers sent meanwhile all succeed. FUZZ_RUNS
 * sets the number of requests (300 by default, a few seconds).
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 300)

let app: TestApp
/** The organization the requests come from. */
let attacker: LedgerFixture
/** An organization whose transfers run while the fuzz does. */
let victim: LedgerFixture
/** Operator routes act on this one, so they neither lock the attacker out nor touch the victim. */
let target: Awaited<ReturnType<TestApp['createOrg']>>
let ids: string[] = []

beforeAll(async () => {
  app = await startTestApp()
  // The victim's authorizations must fail only if its commits do: on a machine busy with other
  // test files the contract's 500 ms budget could run out for reasons of its own.
  app.kassa.payments.configure({ budgetMs: 10_000 })
  attacker = await ledgerFixture(app, 'Fuzz Attacker')
  victim = await ledgerFixture(app, 'Fuzz Victim')
  target = await app.createOrg('Fuzz Operator Target')
  const alice = await attacker.mint('alice')
  const bob = await attacker.mint('bob')
  await attacker.fund(alice, '1000')
  const hold = await attacker.call('POST', '/v1/holds', { accountId: alice, asset: 'USDC', amount: '1', expiresInSeconds: 600 })
  const payment = await attacker.call('POST', '/v1/payments/authorize', { accountId: alice, asset: 'USDC', amount: '1' })
  const ops = await app.ops('GET', `/ops/v1/orgs/${target.id}`)
  expect(ops.status).toBe(200)
  ids = [alice, bob, hold.body.id, payment.body.id, target.id, target.publishableKeyId]
}, 60_000)
afterAll(async () => {
  await app.close()
}, 60_000)

interface Route {
  method: string
  path: string
  schema: Schema | undefined
}

interface Schema {
  type?: string
  properties?: Record<string, Schema>
  items?: Schema
  anyOf?: Array<{ const?: unknown }>
}

/** Strings a field or a path id may meet: what Postgres cannot store, what parsers trip on, what is merely odd. */
const HOSTILE_STRINGS = [
  'a\u0000b',
  '\ud800',
  'x\udfff',
  '',
  ' ',
  'x'.repeat(5000),
  '../../etc/passwd',
  "'; drop table accounts; --",
  '%00',
  '\u202e\ufeff',
  '1e400',
  '-0',
  '99999999999999999999999999999999999999.999999',
  'NaN',
  '__proto__',
]

const hostileString = fc.oneof(fc.constantFrom(...HOSTILE_STRINGS), fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ maxLength: 12 }))

const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  hostileString,
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.jsonValue({ maxDepth: 3 }),
  fc.constant({ ['__proto__']: { admin: true } }),
  fc.constant(JSON.parse('[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]')),
)

/** A plausible value for a schema (so the request gets past validation into the route) or a hostile one. */
function valueFor(schema: Schema | undefined, hostile: boolean, depth = 0): fc.Arbitrary<unknown> {
  if (schema === undefined || depth > 3) return hostile ? hostileValue : fc.constant('x')
  const consts = schema.anyOf?.filter((choice) => choice.const !== undefined).map((choice) => choice.const)
  let plausible: fc.Arbitrary<unknown>
  if (consts !== undefined && consts.length > 0) plausible = fc.constantFrom(...consts)
  else if (schema.type === 'string') plausible = fc.oneof(fc.nat().map((index) => ids[index % ids.length]!), fc.constantFrom('USDC', 'USDT', '1', '0.5', '1000000', 'https://example.invalid/hook', 'sui', 'note'))
  else if (schema.type === 'integer' || schema.type === 'number') plausible = fc.integer({ min: -5, max: 1_000_000 })
  else if (schema.type === 'boolean') plausible = fc.boolean()
  else if (schema.type === 'array') plausible = fc.array(valueFor(schema.items, hostile, depth + 1), { maxLength: 3 })
  else if (schema.type === 'object' || schema.properties !== undefined) plausible = objectFor(schema, hostile, depth + 1)
  else plausible = hostile ? hostileValue : fc.constant('x')
  return hostile ? fc.oneof({ weight: 3, arbitrary: plausible }, { weight: 1, arbitrary: hostileValue }) : plausible
}

function objectFor(schema: Schema, hostile: boolean, depth: number): fc.Arbitrary<unknown> {
  const fields: Record<string, fc.Arbitrary<unknown>> = {}
  for (const [name, field] of Object.entries(schema.properties ?? {})) fields[name] = valueFor(field, hostile, depth)
  const known = fc.record(fields, { requiredKeys: [] })
  if (!hostile) return known
  // Sometimes a field the schema does not know, a prototype key among them.
  return fc.tuple(known, fc.option(fc.tuple(fc.constantFrom('__proto__', 'constructor', 'extra', 'x'), hostileValue), { nil: undefined })).map(([value, extra]) => {
    const object = value as Record<string, unknown>
    if (extra !== undefined) Object.defineProperty(object, extra[0], { value: extra[1], enumerable: true, configurable: true, writable: true })
    return object
  })
}

/** A body as sent: JSON of a schema-shaped value, or text and bytes no schema expects. */
function bodyFor(route: Route): fc.Arbitrary<string | Uint8Array | undefined> {
  return fc.oneof(
    // Only plausible values (the request reaches the route's own rules), or hostile ones among them.
    { weight: 4, arbitrary: valueFor(route.schema ?? { type: 'object', properties: {} }, false).map((value) => JSON.stringify(value) ?? 'null') },
    { weight: 4, arbitrary: valueFor(route.schema ?? { type: 'object', properties: {} }, true).map((value) => JSON.stringify(value) ?? 'null') },
    { weight: 1, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '['.repeat(50_000) + ']'.repeat(50_000),
        '{"a":'.repeat(5_000) + '1' + '}'.repeat(5_000),
        '{"a":',
        'null',
        '"\\u0000"',
        '{"description":"\\ud800"}',
        '{"__proto__":{"x":1}}',
        new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]),
        new Uint8Array([0xff, 0xfe, 0x00, 0x00]),
      ),
    },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
  )
}

const pathId = fc.oneof(
  // The ids are made before the run starts: picked by index, not captured when this is built.
  { weight: 3, arbitrary: fc.nat().map((index) => ids[index % ids.length]!) },
  { weight: 1, arbitrary: fc.constantFrom('%00', 'x%00y', '%ff', '%ED%A0%80', '%C0%AF', '..%2f..', '%25', 'x'.repeat(3000), '%E2%80%AE') },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }).map((text) => encodeURIComponent(text.isWellFormed() ? text : text.toWellFormed())) },
)

const idempotencyKey = fc.option(
  fc.oneof({ weight: 3, arbitrary: fc.uuid() }, { weight: 1, arbitrary: fc.constantFrom('', ' ', 'x'.repeat(256), 'x'.repeat(10_000), 'caf\u00e9', 'a\tb') }, { weight: 1, arbitrary: fc.string({ maxLength: 20 }) }),
  { nil: undefined, freq: 2 },
)
const contentType = fc.oneof(
  { weight: 6, arbitrary: fc.constant('application/json') },
  { weight: 1, arbitrary: fc.constantFrom('application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded', '') },
)

function writeRoutes(document: { paths: Record<string, Record<string, { requestBody?: { content?: Record<string, { schema?: Schema }> } }>> }): Route[] {
  const routes: Route[] = []
  for (const [path, item] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      if (!['post', 'put', 'patch', 'delete'].includes(method)) continue
      routes.push({ method: method.toUpperCase(), path, schema: operation.requestBody?.content?.['application/json']?.schema })
    }
  }
  return routes
}

test(`hostile bodies, headers and path ids on every write route: never a 5xx, the ledger verifies, another organization is unaffected (${RUNS} requests)`, async () => {
  const document = (await app.call('GET', '/openapi.json')).body
  const routes = writeRoutes(document)
  expect(routes.length).toBeGreaterThan(30)
  const statuses = new Map<number, number>()
  const perRoute = new Map<string, number>()
  let slowestMs = 0
  let unsendable = 0

  // The victim's transfers run from before the first fuzzed request to after the last.
  const payer = await victim.mint('payer')
  const payee = await victim.mint('payee')
  await victim.fund(payer, '100000')
  let fuzzing = true
  const victimAnswers: number[] = []
  const victimDeclines: unknown[] = []
  const victimLoop = (async () => {
    while (fuzzing || victimAnswers.length === 0) {
      const [transfer, authorization] = await Promise.all([
        victim.call('POST', '/v1/transfers', { sourceAccountId: payer, destinationAccountId: payee, asset: 'USDC', amount: '1' }),
        victim.call('POST', '/v1/payments/authorize', { accountId: payer, asset: 'USDC', amount: '1' }),
      ])
      victimAnswers.push(transfer.status)
      if (authorization.body.state === 'authorized') victimAnswers.push(201)
      else victimDeclines.push(authorization.body.failureCode ?? authorization.status)
      // A real client's next request arrives through the event loop's I/O; in process, on the
      // embedded database (whose queries settle as promises), a loop that never yields would keep
      // anything waiting on a thread (key generation, timers) from ever running.
      await new Promise((resolve) => setImmediate(resolve))
    }
  })()

  const request = fc.record({
    route: fc.constantFrom(...routes),
    ids: fc.array(pathId, { minLength: 2, maxLength: 2 }),
    body: fc.constant(undefined as string | Uint8Array | undefined),
    key: idempotencyKey,
    contentType,
  }).chain((sent) => bodyFor(sent.route).map((body) => ({ ...sent, body })))

  try {
    await fc.assert(
      fc.asyncProperty(request, async (sent) => {
        let index = 0
        const path = sent.route.path.replace(/\{[^}]+\}/g, () => sent.ids[index++ % sent.ids.length]!)
        const isOps = path.startsWith('/ops/')
        const headers = new Headers()
        let built: Request
        try {
          headers.set('authorization', `Bearer ${isOps ? app.config.operatorToken : attacker.org.testKey}`)
          if (sent.contentType !== '') headers.set('content-type', sent.contentType)
          if (sent.key !== undefined) headers.set('idempotency-key', sent.key)
          built = new Request(`http://kassa.test${path}`, { method: sent.route.method, headers, body: sent.body })
        } catch {
          // A header or URL no client can send (a character outside Latin-1 in a header).
          unsendable += 1
          return
        }
        const started = performance.now()
        const response = await app.kassa.handle(built)
        const text = await response.text()
        slowestMs = Math.max(slowestMs, performance.now() - started)
        statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1)
        perRoute.set(`${sent.route.method} ${sent.route.path}`, (perRoute.get(`${sent.route.method} ${sent.route.path}`) ?? 0) + 1)
        if (response.status >= 500) throw new Error(`${response.status} for ${sent.route.method} ${path}: ${text}`)
        if (response.status >= 400) expect(JSON.parse(text).error.code).toBeString()
      }),
      { numRuns: RUNS, endOnFailure: true },
    )
  } finally {
    // The victim's loop ends with the fuzz, whether it passed or not.
    fuzzing = false
    await victimLoop
  }
  await app.kassa.runtime.ledger.drain()

  const counts = Object.fromEntries([...statuses.entries()].sort(([a], [b]) => a - b))
  console.log(`fuzz: ${RUNS} requests over ${perRoute.size} of ${routes.length} write routes; answers by status ${JSON.stringify(counts)}; ${unsendable} unsendable; slowest ${slowestMs.toFixed(1)} ms; the other organization's ${victimAnswers.length} transfers and authorizations meanwhile: ${victimAnswers.filter((status) => status === 201).length} succeeded`)
  expect([...statuses.keys()].filter((status) => status >= 500)).toEqual([])
  expect(victimDeclines).toEqual([])
  expect(victimAnswers.every((status) => status === 201)).toBe(true)
  await expectVerified(app)
}, 600_000)
