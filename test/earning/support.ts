import { expect } from 'bun:test'
import { sql } from 'drizzle-orm'
import { queryRows } from '../../db/client.ts'
import type { TestApp } from '../support/app.ts'

/** Creates a vault through the operator API; `terms` override the defaults used here. */
export async function createVault(app: TestApp, vaultId: string, terms: Record<string, unknown> = {}): Promise<any> {
  const response = await app.ops('POST', '/ops/v1/vaults', { vaultId, name: `Vault ${vaultId}`, asset: 'USDC', minSubscription: '1', minRedemption: '0.5', ...terms })
  expect(response.status).toBe(201)
  return response.body
}

/** The vault's open cycle of a kind, read through the operator API. */
export async function openCycleOf(app: TestApp, vaultId: string, kind: 'deposit' | 'redeem'): Promise<any> {
  const response = await app.ops('GET', `/ops/v1/vaults/${vaultId}/cycles`)
  expect(response.status).toBe(200)
  return response.body.cycles.find((cycle: any) => cycle.cycleKind === kind && cycle.state === 'open')
}

/** An account's shares of a vault as the ledger holds them (free and locked), as decimal strings. */
export function sharesOf(app: TestApp, orgId: string, accountId: string, vaultId: string): { available: string; held: string } {
  const row = app.kassa.runtime.ledger.balance(orgId, accountId, `shares:${vaultId}`)
  const format = (value: bigint) => (Number(value) / 1e6).toFixed(6)
  return { available: format(row?.available ?? 0n), held: format(row?.held ?? 0n) }
}

/** Events of a type, oldest first, as written (the organization's and the platform-wide ones). */
export async function eventsOf(app: TestApp, type: string): Promise<Array<{ orgId: string | null; data: any }>> {
  await app.kassa.runtime.ledger.drain()
  return queryRows(app.kassa.runtime.db, sql`select org_id as "orgId", data from events where type = ${type} order by seq`)
}

export async function intentRows(app: TestApp, cycleId: string): Promise<Array<{ id: string; state: string; reason: string | null; amount: string | null; shares: string | null }>> {
  return queryRows(app.kassa.runtime.db, sql`select id, state, reason, amount::text, shares::text from vault_intents where cycle_id = ${cycleId} order by id`)
}
