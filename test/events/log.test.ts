import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import postgres from 'postgres'
import { queryRows } from '../../db/client.ts'
import { newId } from '../../server/lib/ids.ts'
import { appendEvent } from '../../server/modules/events/writer.ts'
import { startTestApp, type TestApp, type TestOrg } from '../support/app.ts'
import { onPostgres } from '../support/db.ts'

let app: TestApp
let alpha: TestOrg
let beta: TestOrg

beforeAll(async () => {
  // No delivery worker: these tests read the log only.
  app = await startTestApp({ webhookDelivery: false })
  alpha = await app.createOrg('Alpha')
  beta = await app.createOrg('Beta')
})
afterAll(async () => {
  await app.close()
})

async function writeEvents(orgId: string | null, type: string, count: number): Promise<string[]> {
  const ids: string[] = []
  for (let index = 0; index < count; index++) {
    ids.push(await appendEvent(app.kassa.runtime.db, { orgId, type, data: { index }, created: new Date() }))
  }
  return ids
}

async function readAll(org: TestOrg, query = '', limit = 50): Promise<string[]> {
  const ids: string[] = []
  let after = ''
  for (;;) {
    const response = await app.call('GET', `/v1/events?limit=${limit}${query}${after}`, { key: org.testKey })
    expect(response.status).toBe(200)
    ids.push(...response.body.events.map((event: { id: string }) => event.id))
    if (!response.body.hasMore) return ids
    after = `&after=${ids.at(-1)}`
  }
}

async function eventCount(): Promise<number> {
  const [row] = await queryRows<{ count: string }>(app.kassa.runtime.db, sql`select count(*)::text as count from events`)
  return Number(row!.count)
}

describe('GET /v1/events', () => {
  test('pages through the log in write order with after and limit, answering the contract envelope', async () => {
    const written = await writeEvents(alpha.id, 'account.updated', 7)
    const firstPage = await app.call('GET', '/v1/events?limit=3&types=account.updated', { key: alpha.testKey })
    expect(firstPage.status).toBe(200)
    expect(firstPage.body.hasMore).toBe(true)
    expect(firstPage.body.events.map((event: { id: string }) => event.id)).toEqual(written.slice(0, 3))
    expect(firstPage.body.events[0]).toEqual({ id: written[0], orgId: alpha.id, type: 'account.updated', created: expect.any(String), data: { index: 0 }, deliveries: [] })
    expect(await readAll(alpha, '&types=account.updated', 3)).toEqual(written)
    const last = await app.call('GET', `/v1/events?types=account.updated&after=${written[6]}`, { key: alpha.testKey })
    expect(last.body).toEqual({ events: [], hasMore: false })
  })

  test('filters by a comma-separated list of exact types', async () => {
    const paused = await writeEvents(alpha.id, 'treasury.withdrawal.approved', 2)
    const funded = await writeEvents(alpha.id, 'transaction.claim.confirmed', 1)
    const response = await app.call('GET', '/v1/events?types=treasury.withdrawal.approved,transaction.claim.confirmed', { key: alpha.testKey })
    expect(response.body.events.map((event: { id: string }) => event.id)).toEqual([...paused, ...funded])
  })

  test.each([
    ['zero', '0'],
    ['above the maximum', '201'],
    ['negative', '-5'],
    ['not a number', 'ten'],
    ['fractional', '2.5'],
  ])('refuses a limit that is %s, naming limit', async (_name, limit) => {
    const response = await app.call('GET', `/v1/events?limit=${limit}`, { key: alpha.testKey })
    expect(response.status).toBe(400)
    expect(response.body.error).toMatchObject({ code: 'invalid_request', field: 'limit' })
  })

  test('accepts the largest limit and defaults to 50', async () => {
    await writeEvents(alpha.id, 'account.bulk', 60)
    const largest = await app.call('GET', '/v1/events?limit=200', { key: alpha.testKey })
    expect(largest.status).toBe(200)
    const byDefault = await app.call('GET', '/v1/events', { key: alpha.testKey })
    expect(byDefault.body.events).toHaveLength(50)
    expect(byDefault.body.hasMore).toBe(true)
  })

  test('refuses an after that is not in the organization log, and malformed types', async () => {
    const unknown = await app.call('GET', `/v1/events?after=${newId('evt')}`, { key: alpha.testKey })
    expect(unknown.status).toBe(400)
    expect(unknown.body.error).toMatchObject({ code: 'invalid_request', field: 'after' })
    const [betaEvent] = await writeEvents(beta.id, 'account.updated', 1)
    const foreign = await app.call('GET', `/v1/events?after=${betaEvent}`, { key: alpha.testKey })
    expect(foreign.status).toBe(400)
    expect(foreign.body.error).toMatchObject({ code: 'invalid_request', field: 'after' })
    for (const types of ['account.*', 'DROP TABLE', ',', Array.from({ length: 21 }, (_, index) => `account.t${index}`).join(',')]) {
      const response = await app.call('GET', `/v1/events?types=${encodeURIComponent(types)}`, { key: alpha.testKey })
      expect(response.status).toBe(400)
      expect(response.body.error).toMatchObject({ code: 'invalid_request', field: 'types' })
    }
  })

  test('needs a secret or test key', async () => {
    expect((await app.call('GET', '/v1/events', { key: alpha.publishableKey })).status).toBe(403)
    expect((await app.call('GET', '/v1/events')).status).toBe(401)
  })

  test("never shows another organization's events, and shows platform-wide vault events to every organization", async () => {
    const mine = await writeEvents(alpha.id, 'account.secret_of_alpha', 3)
    const theirs = await writeEvents(beta.id, 'account.secret_of_beta', 3)
    const platform = await writeEvents(null, 'vault.paused', 1)
    const alphaLog = await readAll(alpha, '', 200)
    const betaLog = await readAll(beta, '', 200)
    for (const id of theirs) expect(alphaLog).not.toContain(id)
    for (const id of mine) expect(betaLog).not.toContain(id)
    expect(alphaLog).toEqual(expect.arrayContaining([...mine, ...platform]))
    expect(betaLog).toEqual(expect.arrayContaining([...theirs, ...platform]))
    const vault = await app.call('GET', `/v1/events/${platform[0]}`, { key: beta.testKey })
    expect(vault.body).toMatchObject({ id: platform[0], orgId: null, type: 'vault.paused' })
    expect((await app.call('GET', `/v1/events/${theirs[0]}`, { key: alpha.testKey })).status).toBe(404)
    // The organization's own log answers only its events, however they are asked for.
    const everything = await queryRows<{ org_id: string | null }>(app.kassa.runtime.db, sql`select org_id from events where id in (${sql.join(alphaLog.map((id) => sql`${id}`), sql`, `)})`)
    expect(everything.every((row) => row.org_id === alpha.id || row.org_id === null)).toBe(true)
  })

  test('a refused read writes nothing', async () => {
    const before = await eventCount()
    await app.call('GET', '/v1/events?limit=0', { key: alpha.testKey })
    await app.call('GET', `/v1/events?after=${newId('evt')}`, { key: alpha.testKey })
    expect(await eventCount()).toBe(before)
  })
})

describe('paging while events are written', () => {
  const WRITERS = 8
  /** On the embedded database the writers share its one connection, so a shorter run sees as much. */
  const RUN_MS = onPostgres ? 2500 : 1000

  test(`never skips or repeats an event while ${WRITERS} writers commit out of order (${onPostgres ? 'postgres, concurrent connections' : 'embedded, one connection'})`, async () => {
    const org = await app.createOrg('Concurrent')
    // The reader pages as fast as it can for the whole run; the rate limit is not under test here.
    await app.ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 1_000_000 })
    const committed = new Set<string>()
    const rolledBack = new Set<string>()
    const writerClient = onPostgres ? postgres(app.database.databaseUrl!, { max: WRITERS, onnotice: () => {} }) : undefined
    let writing = true

    async function transactionOfEvents(): Promise<void> {
      const ids = [newId('evt'), newId('evt')]
      const rollBack = Math.random() < 0.15
      const pause = Math.floor(Math.random() * 25)
      const insert = (id: string) => ({ id, orgId: org.id, type: 'account.concurrent', data: { id }, createdAt: new Date() })
      if (writerClient) {
        try {
          await writerClient.begin(async (tx) => {
            for (const id of ids) {
              const row = insert(id)
              await tx`insert into events (id, org_id, type, data, created_at) values (${row.id}, ${row.orgId}, ${row.type}, ${tx.json(row.data)}, ${row.createdAt})`
              // Sequence numbers are taken now; the commit comes later, after others have committed.
              await Bun.sleep(pause)
            }
            if (rollBack) throw new Error('roll back')
          })
          for (const id of ids) committed.add(id)
        } catch {
          for (const id of ids) rolledBack.add(id)
        }
        return
      }
      try {
        await app.kassa.runtime.db.transaction(async (tx) => {
          for (const id of ids) await appendEventWithId(tx, insert(id))
          if (rollBack) throw new Error('roll back')
        })
        for (const id of ids) committed.add(id)
      } catch {
        for (const id of ids) rolledBack.add(id)
      }
    }

    const writers = Array.from({ length: WRITERS }, async () => {
      while (writing) await transactionOfEvents()
    })

    // The log as served, and a naive reader of "seq > last seq" beside it, to show the hazard is real.
    const served: string[] = []
    let after = ''
    let naiveSeq = 0n
    const naiveSeen = new Set<string>()
    const readPage = async () => {
      const response = await app.call('GET', `/v1/events?types=account.concurrent&limit=7${after}`, { key: org.testKey })
      expect(response.status).toBe(200)
      const ids = response.body.events.map((event: { id: string }) => event.id)
      served.push(...ids)
      if (ids.length > 0) after = `&after=${ids.at(-1)}`
      const naive = await queryRows<{ id: string; seq: string }>(
        app.kassa.runtime.db,
        sql`select id, seq::text as seq from events where org_id = ${org.id} and seq > ${naiveSeq.toString()}::bigint order by seq limit 50`,
      )
      for (const row of naive) naiveSeen.add(row.id)
      if (naive.length > 0) naiveSeq = BigInt(naive.at(-1)!.seq)
    }
    const started = Date.now()
    while (Date.now() - started < RUN_MS) await readPage()
    writing = false
    await Promise.all(writers)
    await writerClient?.end()
    for (let index = 0; index < 1000; index++) {
      const before = served.length
      await readPage()
      if (served.length === before) break
    }

    expect(committed.size).toBeGreaterThan(20)
    expect(new Set(served).size).toBe(served.length)
    expect(served.filter((id) => rolledBack.has(id))).toEqual([])
    expect([...committed].filter((id) => !served.includes(id))).toEqual([])
    expect(served).toHaveLength(committed.size)
    if (onPostgres) {
      // Out-of-order commits did happen: the naive reader passed over some committed events.
      expect([...committed].filter((id) => !naiveSeen.has(id)).length).toBeGreaterThan(0)
    }
  }, 60_000)
})

async function appendEventWithId(executor: Parameters<typeof appendEvent>[0], row: { id: string; orgId: string; type: string; data: Record<string, unknown>; createdAt: Date }): Promise<void> {
  const { events } = await import('../../db/schema/index.ts')
  await executor.insert(events).values(row)
}
