import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { CompactSign, generateKeyPair } from 'jose'
import { PDFDocument } from 'pdf-lib'
import type { SignedStatement } from '../../server/modules/statements/document.ts'
import { verifyStatementChain } from '../../server/modules/statements/verify.ts'
import { callApp } from '../support/app.ts'
import { startTestApp, type TestApp } from '../support/app.ts'
import { ManualWallClock, statementsFixture, type StatementsFixture } from './support.ts'


// Each test seals days on a database of its own; a busy shared host can take well over 5 s for that.
setDefaultTimeout(60_000)
const wall = new ManualWallClock(Date.parse('2027-02-01T08:00:00.000Z'))
let app: TestApp
let fx: StatementsFixture
let alice: string
let bob: string
let chain: SignedStatement[]
let jwks: any

beforeAll(async () => {
  app = await startTestApp({}, { wallClockMs: wall.read })
  fx = await statementsFixture(app, wall, 'Reading Org')
  alice = await fx.mint('alice')
  bob = await fx.mint('bob')
  // Four days: funding and a transfer, a transfer, a quiet day, a USDT funding; the key rotates before the third is sealed.
  await fx.fund(alice, '500')
  fx.at('2027-02-01T15:30:00.000Z')
  await fx.transfer(alice, bob, '120')
  await fx.advance(24 * 3600)
  await fx.transfer(alice, bob, '10.5')
  await fx.advance(24 * 3600)
  await fx.seal()
  expect((await app.ops('POST', '/ops/v1/statement-keys/rotate')).status).toBe(201)
  await fx.advance(24 * 3600)
  await fx.fund(alice, '7', 'USDT')
  await fx.advance(24 * 3600)
  await fx.seal()
  chain = await fx.statements(alice, '?asset=USDC')
  jwks = (await app.call('GET', '/.well-known/jwks.json')).body
}, 60_000)
afterAll(async () => {
  await app.close()
}, 60_000)

describe('reading statements', () => {
  test('an account lists its statements by date range and asset, oldest first, a page at a time', async () => {
    expect(chain.map((statement) => statement.businessDate)).toEqual(['2027-02-01', '2027-02-02', '2027-02-03', '2027-02-04'])
    const usdt = await fx.statements(alice, '?asset=USDT')
    expect(usdt.map((statement) => [statement.businessDate, statement.closingBalance])).toEqual([['2027-02-04', '7.000000']])
    const range = await fx.statements(alice, '?asset=USDC&from=2027-02-02&to=2027-02-03')
    expect(range.map((statement) => statement.businessDate)).toEqual(['2027-02-02', '2027-02-03'])
    const first = await fx.call('GET', `/v1/accounts/${alice}/statements?limit=2`)
    expect(first.body.hasMore).toBe(true)
    expect(first.body.statements.map((s: SignedStatement) => `${s.businessDate} ${s.asset}`)).toEqual(['2027-02-01 USDC', '2027-02-02 USDC'])
    const second = await fx.call('GET', `/v1/accounts/${alice}/statements?limit=2&after=${first.body.statements[1].id}`)
    const third = await fx.call('GET', `/v1/accounts/${alice}/statements?limit=2&after=${second.body.statements[1].id}`)
    expect(second.body.statements.map((s: SignedStatement) => `${s.businessDate} ${s.asset}`)).toEqual(['2027-02-03 USDC', '2027-02-04 USDC'])
    expect(third.body).toMatchObject({ hasMore: false })
    expect(third.body.statements.map((s: SignedStatement) => `${s.businessDate} ${s.asset}`)).toEqual(['2027-02-04 USDT'])
  })

  test('bad filters are invalid_request naming the field; another organization\'s account is not found', async () => {
    for (const [query, field] of [
      ['?from=2027-02-30', 'from'],
      ['?to=yesterday', 'to'],
      ['?from=2027-02-03&to=2027-02-01', 'to'],
      ['?limit=0', 'limit'],
      ['?after=stmt_nope', 'after'],
    ] as const) {
      const response = await fx.call('GET', `/v1/accounts/${alice}/statements${query}`)
      expect({ query, status: response.status, code: response.body.error?.code, field: response.body.error?.field }).toEqual({ query, status: 400, code: 'invalid_request', field })
    }
    const unsupported = await fx.call('GET', `/v1/accounts/${alice}/statements?asset=DOGE`)
    expect(unsupported.body.error).toMatchObject({ code: 'unsupported_asset', field: 'asset' })
    const other = await app.createOrg('Other Org')
    const foreign = await app.call('GET', `/v1/accounts/${alice}/statements`, { key: other.testKey })
    expect(foreign.status).toBe(404)
    const foreignStatement = await app.call('GET', `/v1/statements/${chain[0]!.id}`, { key: other.testKey })
    expect(foreignStatement.status).toBe(404)
  })

  test('one statement as JSON, as CSV with Accept: text/csv, and as a PDF with Accept: application/pdf', async () => {
    const statement = chain[0]!
    const json = await fx.call('GET', `/v1/statements/${statement.id}`)
    expect(json.status).toBe(200)
    expect(json.body).toEqual(statement)

    const csv = await app.call('GET', `/v1/statements/${statement.id}`, { key: fx.org.testKey, headers: { accept: 'text/csv' } })
    expect(csv.status).toBe(200)
    expect(csv.headers.get('content-type')).toStartWith('text/csv')
    expect((csv.body as string).split('\r\n')).toEqual([
      'line,booked_at,movement_id,kind,reference,amount,balance_after',
      'opening,2027-02-01T00:00:00.000Z,,,,,0.000000',
      `1,2027-02-01T08:00:00.000Z,${statement.lines[0]!.movementId},sandbox_funding,${statement.lines[0]!.reference},500.000000,500.000000`,
      `2,2027-02-01T15:30:00.000Z,${statement.lines[1]!.movementId},transfer,${statement.lines[1]!.reference},-120.000000,380.000000`,
      'closing,2027-02-02T00:00:00.000Z,,,,,380.000000',
      '',
    ])

    const response = await app.kassa.handle(
      new Request(`http://kassa.test/v1/statements/${statement.id}`, { headers: { authorization: `Bearer ${fx.org.testKey}`, accept: 'application/pdf' } }),
    )
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('application/pdf')
    const bytes = new Uint8Array(await response.arrayBuffer())
    expect(new TextDecoder().decode(bytes.slice(0, 5))).toBe('%PDF-')
    const pdf = await PDFDocument.load(bytes)
    expect(pdf.getTitle()).toBe(`Kassa statement ${alice} USDC 2027-02-01`)
    expect(pdf.getPageCount()).toBe(1)

    const byQuery = await app.call('GET', `/v1/statements/${statement.id}?format=csv`, { key: fx.org.testKey, headers: { accept: 'application/pdf' } })
    expect(byQuery.headers.get('content-type')).toStartWith('text/csv')
    const badFormat = await fx.call('GET', `/v1/statements/${statement.id}?format=xml`)
    expect(badFormat.body.error).toMatchObject({ code: 'invalid_request', field: 'format' })
    expect((await fx.call('GET', '/v1/statements/stmt_0000')).status).toBe(404)
  })

  test('statements need a secret key', async () => {
    const publishable = await app.call('GET', `/v1/accounts/${alice}/statements`, { key: fx.org.publishableKey })
    expect(publishable.status).toBe(403)
    const anonymous = await app.call('GET', `/v1/statements/${chain[0]!.id}`)
    expect(anonymous.status).toBe(401)
  })
})

describe('signatures, the chain and the offline verifier', () => {
  test('the JWKS is public and keeps every key after a rotation; statements name the key that signed them', async () => {
    const response = await callApp(app.kassa, 'GET', '/.well-known/jwks.json')
    expect(response.status).toBe(200)
    expect(response.body.keys).toHaveLength(2)
    for (const key of response.body.keys) expect(key).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' })
    const [oldKey, newKey] = response.body.keys.map((key: { kid: string }) => key.kid)
    expect(chain.map((statement) => statement.keyId)).toEqual([oldKey, oldKey, newKey, newKey])
    const listed = await app.ops('GET', '/ops/v1/statement-keys')
    expect(listed.body.keys.map((key: { kid: string; current: boolean }) => [key.kid, key.current])).toEqual([
      [oldKey, false],
      [newKey, true],
    ])
  })

  test('each statement carries the previous one\'s hash, and the verifier accepts the whole chain across the rotation', async () => {
    for (let index = 1; index < chain.length; index++) {
      expect(chain[index]!.previousHash).toBe(chain[index - 1]!.hash)
      expect(chain[index]!.openingBalance).toBe(chain[index - 1]!.closingBalance)
    }
    expect(chain[2]!.lines).toEqual([])
    expect(await verifyStatementChain(chain, jwks, { fromFirst: true })).toEqual({ ok: true, statements: 4, problems: [] })
  })

  test('a tampered line is named: its statement, its line and its movement', async () => {
    const tampered = structuredClone(chain)
    const line = tampered[1]!.lines[0]!
    line.amount = '-1.500000'
    const report = await verifyStatementChain(tampered, jwks)
    expect(report.ok).toBe(false)
    expect(report.problems).toEqual([
      expect.objectContaining({ statementId: chain[1]!.id, check: 'hash' }),
      expect.objectContaining({ statementId: chain[1]!.id, businessDate: '2027-02-02', check: 'lines', line: 0, movementId: line.movementId }),
    ])
  })

  test('a missing day, a broken link, a foreign signature and a false invariant are each named', async () => {
    const gap = await verifyStatementChain([chain[0]!, chain[2]!, chain[3]!], jwks)
    expect(gap.problems.map((problem) => [problem.statementId, problem.check])).toEqual([
      [chain[2]!.id, 'gap'],
      [chain[2]!.id, 'gap'],
      [chain[2]!.id, 'link'],
      [chain[2]!.id, 'link'],
    ])

    const { privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' })
    const forged = structuredClone(chain)
    forged[3]!.signature = await new CompactSign(new TextEncoder().encode(forged[3]!.hash)).setProtectedHeader({ alg: 'EdDSA', kid: forged[3]!.keyId }).sign(privateKey)
    const forgedReport = await verifyStatementChain(forged, jwks)
    expect(forgedReport.problems.map((problem) => [problem.statementId, problem.check])).toEqual([[chain[3]!.id, 'signature']])

    const falseInvariant = structuredClone(chain)
    falseInvariant[0]!.invariantOk = false
    const invariantReport = await verifyStatementChain(falseInvariant, jwks)
    expect(invariantReport.problems.map((problem) => problem.check)).toEqual(['hash', 'invariant'])
  })

  test('the verifier is exported for offline use', async () => {
    const manifest = await Bun.file(new URL('../../package.json', import.meta.url)).json()
    expect(manifest.exports['./statements/verify']).toBe('./server/modules/statements/verify.ts')
    const exported = await import('../../server/modules/statements/verify.ts')
    expect(exported.verifyStatementChain).toBe(verifyStatementChain)
  })
})
