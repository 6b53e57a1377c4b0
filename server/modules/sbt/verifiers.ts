import { sql } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { FACT_PATTERN, type ChainReader } from './chain-reader.ts'
import { SbtError } from './envelope.ts'
import { labelTypeEntry, type LabelTypeEntry, type VerifierFamily } from './registry.ts'
import type { SignedInUser } from './user-auth.ts'
import { callVerifyApi, type VerifyApiOptions } from './verify-api.ts'

export interface VerifierContext {
  db: Database
  chain: ChainReader
  verifyApi: VerifyApiOptions
}

export interface CredentialRow {
  id: string
  groupId: string
  labelType: number
  params: Record<string, unknown>
}

export interface Outcome {
  passed: boolean
  /** Why it did not pass, in words a user can act on; absent on a pass. */
  reason?: string
}

type Verifier = (context: VerifierContext, entry: LabelTypeEntry, credential: CredentialRow, user: SignedInUser) => Promise<Outcome>

function rowsOf<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

function pass(): Outcome {
  return { passed: true }
}
function fail(reason: string): Outcome {
  return { passed: false, reason }
}

function atLeast(actual: bigint, min: bigint, what: string): Outcome {
  return actual >= min ? pass() : fail(`${what} is ${actual}, at least ${min} is required`)
}

/** The address a chain's check reads: the Sui address itself, or the wallet bound for that chain. */
function addressOn(entry: LabelTypeEntry, user: SignedInUser): string | undefined {
  if (entry.chain === 'sui') return user.suiAddress
  if (entry.chain === 'ton') return user.bindings.ton
  return user.bindings.bsc ?? user.bindings.evm
}

const VERIFIERS: Record<VerifierFamily, Verifier> = {
  async click(context, _entry, credential, user) {
    const rows = rowsOf(await context.db.execute(sql`select 1 from sbt_clicks where user_id = ${user.id} and credential_id = ${credential.id} limit 1`))
    return rows.length > 0 ? pass() : fail('No click or participation is recorded for this task yet')
  },
  async always() {
    return pass()
  },
  async wallet_bound(_context, entry, _credential, user) {
    const bound = entry.binding === 'sui' ? (user.bindings.sui ?? user.suiAddress) : user.bindings[entry.binding!]
    return bound !== undefined && bound.trim() !== '' ? pass() : fail(`No ${entry.binding} wallet is bound`)
  },
  async account_named(_context, entry, _credential, user) {
    const name = user.bindings[entry.binding!]
    return name !== undefined && name.trim() !== '' ? pass() : fail(`No ${entry.binding} account name is connected`)
  },
  async onchain(context, entry, credential, user) {
    const address = addressOn(entry, user)
    if (address === undefined || address === '') return fail(`No ${entry.chain} wallet is bound`)
    const fact = String(credential.params.fact)
    const amount = await context.chain.readFact(entry.chain!, address, fact)
    return atLeast(amount, BigInt(String(credential.params.min)), `${fact} on ${entry.chain}`)
  },
  async sbt_holding(context, _entry, credential, user) {
    const sbtId = Number(credential.params.sbtId)
    const claimed = rowsOf(await context.db.execute(sql`select 1 from sbt_claims where user_id = ${user.id} and sbt_id = ${sbtId} and claim_type = 4 limit 1`))
    if (claimed.length > 0) return pass()
    const onChain = await context.chain.readFact('sui', user.suiAddress, `sbt:${sbtId}`)
    return onChain >= 1n ? pass() : fail(`SBT ${sbtId} is not held`)
  },
  async invites(context, _entry, credential, user) {
    const [row] = rowsOf<{ count: string | number }>(await context.db.execute(sql`select count(*) as count from sbt_users where invited_by = ${user.id}`))
    return atLeast(BigInt(row?.count ?? 0), BigInt(String(credential.params.min)), 'Invitee count')
  },
  async points(context, entry, credential, user) {
    const min = BigInt(String(credential.params.min))
    if (entry.metric === 'score') return atLeast(BigInt(user.score), min, 'Score')
    if (entry.metric === 'streak') return atLeast(BigInt(user.streakDays), min, 'Streak (days)')
    const [row] = rowsOf<{ total: string | number | null }>(
      await context.db.execute(sql`select coalesce(sum(r.points), 0) as total from sbt_claims c join sbt_rewards r on r.sbt_id = c.sbt_id where c.user_id = ${user.id} and c.claim_type = 4`),
    )
    return atLeast(BigInt(row?.total ?? 0), min, 'Points')
  },
  async custom_api(context, _entry, credential, user) {
    const verified = await callVerifyApi(String(credential.params.url), String(credential.params.secret), { credentialId: credential.id, suiAddress: user.suiAddress, bindings: user.bindings }, context.verifyApi)
    return verified ? pass() : fail("The issuer's Verify API says the task is not done")
  },
  async platform_api(_context, entry) {
    throw new SbtError('unsupported_label_type', `labelType ${entry.labelType} (${entry.task}) needs the platform's own API, which this deployment does not call; the credential cannot be verified here`)
  },
}

/** Runs a credential's check, dispatching on its labelType through the one registry. */
export async function runVerifier(context: VerifierContext, credential: CredentialRow, user: SignedInUser): Promise<Outcome> {
  const entry = labelTypeEntry(credential.labelType)
  if (entry === undefined) throw new SbtError('unsupported_label_type', `labelType ${credential.labelType} is not defined`)
  return VERIFIERS[entry.family](context, entry, credential, user)
}

const WHOLE = /^\d{1,30}$/

/**
 * The parameters a credential of each family must carry, checked at import so that a verify
 * never meets a credential it cannot run. Answers a message naming the problem, or undefined.
 */
export function paramsProblem(labelType: number, params: Record<string, unknown>): string | undefined {
  const entry = labelTypeEntry(labelType)
  if (entry === undefined) return `labelType ${labelType} is not defined (see the labelType registry)`
  const whole = (name: string) => (typeof params[name] === 'string' && WHOLE.test(params[name] as string)) || (Number.isSafeInteger(params[name]) && (params[name] as number) >= 0)
  switch (entry.family) {
    case 'onchain':
      if (typeof params.fact !== 'string' || !FACT_PATTERN.test(params.fact)) return 'params.fact must name what is measured (letters, digits, : _ . -, up to 100)'
      if (!whole('min')) return 'params.min must be a whole number (a string for large amounts)'
      return undefined
    case 'sbt_holding':
      return Number.isSafeInteger(params.sbtId) && (params.sbtId as number) > 0 ? undefined : 'params.sbtId must be a positive integer'
    case 'invites':
    case 'points':
      return whole('min') ? undefined : 'params.min must be a whole number'
    case 'custom_api': {
      if (typeof params.url !== 'string') return 'params.url must be the https:// URL of the issuer Verify API'
      if (typeof params.secret !== 'string' || params.secret.length < 16) return 'params.secret must be a signing secret of at least 16 characters'
      return undefined
    }
    default:
      return undefined
  }
}
