import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sha256Hex } from '../../server/lib/hash.ts'
import { newId } from '../../server/lib/ids.ts'
import { insertKey } from '../../server/modules/orgs/repo.ts'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'

let app: TestApp
let org: TestOrg

beforeAll(async () => {
  app = await startTestApp()
  org = await app.createOrg('Propagation Org')
}, 60_000)
afterAll(async () => {
  await app.close()
}, 60_000)

const BASE58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const secretOf = (seed: number) => `svc_test_${Array.from({ length: 32 }, (_, index) => BASE58[(seed * 31 + index * 7) % BASE58.length]).join('')}`

/** Counts the key cache's reads of the database (its loader), for as long as the test runs. */
function countReads(): { reads: () => number; restore: () => void } {
  const cache = app.kassa.runtime.keys as unknown as { loader: (hash: string) => Promise<unknown> }
  const real = cache.loader
  let reads = 0
  cache.loader = (hash) => {
    reads += 1
    return real(hash)
  }
  return { reads: () => reads, restore: () => (cache.loader = real) }
}

describe('a key issued on another instance', () => {
  test('works on its first request here, before this instance hears of it: a key missing from memory is read from the database once', async () => {
    // Written straight to the database, as another instance issues a key: no notice reaches this one.
    const secret = secretOf(1)
    await insertKey(app.kassa.runtime.db, { id: newId('key'), orgId: org.id, type: 'test', environment: 'sandbox', keyHash: sha256Hex(secret), lastFour: secret.slice(-4) })
    const { reads, restore } = countReads()
    try {
      const first = await app.call('POST', '/v1/accounts', { key: secret, body: { externalId: 'first-use' } })
      expect(first.status).toBe(201)
      const again = await app.call('GET', `/v1/accounts/${first.body.id}`, { key: secret })
      expect(again.status).toBe(200)
      expect(reads()).toBe(1)
    } finally {
      restore()
    }
  })

  test('a key unknown everywhere is 401, and repeating it does not read the database again', async () => {
    const { reads, restore } = countReads()
    try {
      for (let attempt = 0; attempt < 5; attempt++) {
        const refused = await app.call('GET', '/v1/accounts', { key: secretOf(2) })
        expect({ status: refused.status, code: refused.body.error.code }).toEqual({ status: 401, code: 'authentication_error' })
      }
      // A key that is not even shaped like one is never looked up.
      expect((await app.call('GET', '/v1/accounts', { key: 'svc_test_short' })).status).toBe(401)
      expect(reads()).toBe(1)
    } finally {
      restore()
    }
  })
})
