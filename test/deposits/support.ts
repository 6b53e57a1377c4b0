import { expect } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { sql } from 'drizzle-orm'
import { bytesToHex } from '@noble/hashes/utils.js'
import { base58 } from '@scure/base'
import { queryRows } from '../../db/client.ts'
import { ledgerState } from '../ledger/support.ts'
import type { TestApp, TestResponse } from '../support/app.ts'

/** A fresh transaction hash in the network's own form. */
export function txHash(network: 'sui' | 'tron'): string {
  const bytes = new Uint8Array(randomBytes(32))
  return network === 'tron' ? bytesToHex(bytes) : base58.encode(bytes)
}

/** Everything a deposit request could change: the ledger plus the deposit tables. */
export async function depositState(app: TestApp): Promise<unknown> {
  const ledger = await ledgerState(app)
  const [counts] = await queryRows<Record<string, string>>(
    app.kassa.runtime.db,
    sql`select (select count(*) from deposits) as deposits, (select count(*) from deposit_addresses) as addresses,
               (select count(*) from chain_arrivals) as arrivals,
               (select string_agg(id || ':' || state || ':' || disposition, ',' order by id) from chain_arrivals) as arrival_states,
               (select string_agg(id || ':' || state, ',' order by id) from deposits) as deposit_states,
               (select string_agg(id || ':' || state, ',' order by id) from deposit_addresses) as address_states`,
  )
  return { ledger, counts }
}

export async function expectRefusedWithoutAnyChange(app: TestApp, send: () => Promise<TestResponse>, status: number, code: string, field?: string): Promise<TestResponse> {
  const before = await depositState(app)
  const response = await send()
  expect({ status: response.status, code: response.body?.error?.code }).toEqual({ status, code })
  if (field !== undefined) expect(response.body.error.field).toBe(field)
  expect(await depositState(app)).toEqual(before)
  return response
}

export async function eventsOf(app: TestApp, type: string): Promise<Array<{ orgId: string; data: Record<string, unknown> }>> {
  await app.kassa.runtime.ledger.drain()
  return queryRows(app.kassa.runtime.db, sql`select org_id as "orgId", data from events where type = ${type} order by id`)
}

/** The balance of one of the organization's system accounts, as the database holds it. */
export async function systemBalance(app: TestApp, orgId: string, account: string, asset: string): Promise<bigint> {
  await app.kassa.runtime.ledger.drain()
  const [row] = await queryRows<{ available: string }>(
    app.kassa.runtime.db,
    sql`select available::text as available from ledger_balances where org_id = ${orgId} and account_id = ${account} and asset = ${asset}`,
  )
  return BigInt(row?.available ?? '0')
}
