import { afterAll, beforeAll, expect, test } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows, type DatabaseHandle } from '../../db/client.ts'
import { newId } from '../../server/lib/ids.ts'
import { partitionOf } from '../../server/cluster/partitions.ts'
import { createTestDatabase, type TestDatabase } from '../support/db.ts'

/**
 * A server's background passes ask Postgres for the due work of the organizations it owns with
 * `kassa_partition` (migration 0052); the gate and the leases place an organization with
 * `partitionOf`. If the two disagreed for an id, its work would be done by a server that does not
 * own it (refused at the commit) or by none.
 */
let database: TestDatabase
let handle: DatabaseHandle

beforeAll(async () => {
  database = await createTestDatabase()
  handle = await database.open()
})
afterAll(async () => {
  await handle?.close()
  await database?.drop()
})

test('kassa_partition in SQL places every organization id where partitionOf does, for every partition count', async () => {
  const ids = [
    ...Array.from({ length: 500 }, () => newId('org')),
    // Ids no server makes, but the functions must agree on any text: empty, non-ASCII, long.
    '',
    'org_é',
    'org_日本語',
    'org_🙂',
    'x'.repeat(300),
  ]
  for (const count of [1, 7, 64, 1024]) {
    const rows = await queryRows<{ id: string; partition: number }>(
      handle.db,
      sql`select id, kassa_partition(id, ${count}) as partition from unnest(${sql.raw(`array[${ids.map((id) => `'${id.replace(/'/g, "''")}'`).join(',')}]::text[]`)}) as id`,
    )
    expect(rows).toHaveLength(ids.length)
    const disagreeing = rows.filter((row) => Number(row.partition) !== partitionOf(row.id, count))
    expect(disagreeing).toEqual([])
  }
})
