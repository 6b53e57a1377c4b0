import { eq, sql } from 'drizzle-orm'
import type { Database, Executor } from '../../../db/client.ts'
import { sbtClicks, sbtCredentialResults, sbtCredentials } from '../../../db/schema/index.ts'
import { SbtError } from './envelope.ts'
import { labelTypeEntry, NON_ENFORCING_FAMILIES } from './registry.ts'
import type { SignedInUser } from './user-auth.ts'
import { runVerifier, type CredentialRow, type VerifierContext } from './verifiers.ts'

export interface VerifyAnswer {
  credentialId: string
  labelType: number
  /** 1 when the check passed (and a result row with status 1 was written), 0 when it did not. */
  status: 0 | 1
  reason: string | null
}

function rowsOf<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

async function findCredential(db: Database, id: string): Promise<CredentialRow> {
  const [row] = await db.select().from(sbtCredentials).where(eq(sbtCredentials.id, id))
  if (row === undefined) throw new SbtError('credential_not_found', `No credential ${id}`)
  return row
}

/**
 * Writes claim records with claimType 2 (eligible) for every reward of a group whose credentials
 * all have a stored status-1 row for the user; an existing record of any type is left alone.
 */
export async function markEligible(executor: Executor, userId: number, groupId: string): Promise<void> {
  await executor.execute(sql`
    insert into sbt_claims (user_id, sbt_id, claim_type)
    select ${userId}, r.sbt_id, 2 from sbt_rewards r
    where r.group_id = ${groupId}
      and exists (select 1 from sbt_credentials c where c.group_id = ${groupId})
      and not exists (
        select 1 from sbt_credentials c where c.group_id = ${groupId}
          and not exists (select 1 from sbt_credential_results x where x.user_id = ${userId} and x.credential_id = c.id and x.status = 1))
    on conflict (user_id, sbt_id) do nothing`)
}

export class CredentialService {
  constructor(private readonly context: VerifierContext) {}

  /**
   * Runs one credential's check now. The check (which may call an issuer's API or read a chain)
   * runs outside any database transaction; a pass then writes a status-1 result row, and the
   * claim records the pass makes eligible, in one transaction. A failed check writes nothing.
   */
  async verify(credentialId: string, user: SignedInUser): Promise<VerifyAnswer> {
    const credential = await findCredential(this.context.db, credentialId)
    const outcome = await runVerifier(this.context, credential, user)
    if (outcome.passed) {
      await this.context.db.transaction(async (tx) => {
        await tx.insert(sbtCredentialResults).values({ userId: user.id, credentialId: credential.id, status: 1 })
        await markEligible(tx, user.id, credential.groupId)
      })
    }
    return { credentialId: credential.id, labelType: credential.labelType, status: outcome.passed ? 1 : 0, reason: outcome.reason ?? null }
  }

  /** Records a click or participation, what the click-to-verify credentials (8, 12, 72) look for. */
  async click(credentialId: string, user: SignedInUser): Promise<{ credentialId: string; recorded: true }> {
    const credential = await findCredential(this.context.db, credentialId)
    await this.context.db.insert(sbtClicks).values({ userId: user.id, credentialId: credential.id })
    return { credentialId: credential.id, recorded: true }
  }
}

export interface FarmableReport {
  campaignId: string
  credentials: Array<{ id: string; groupId: string; labelType: number; task: string; family: string; enforces: boolean }>
  farmableCredentialIds: string[]
  rewards: Array<{ sbtId: number; title: string; groupId: string; farmable: boolean }>
}

/**
 * Which of a campaign's credentials enforce nothing (click-to-verify, always-verified, wallet or
 * account merely connected), and which rewards can be earned with such credentials alone.
 */
export async function farmableReport(db: Database, campaignId: string): Promise<FarmableReport | undefined> {
  const campaign = rowsOf(await db.execute(sql`select id from sbt_campaigns where id = ${campaignId}`))
  if (campaign.length === 0) return undefined
  const credentials = rowsOf<{ id: string; group_id: string; label_type: number }>(
    await db.execute(sql`select c.id, c.group_id, c.label_type from sbt_credentials c join sbt_credential_groups g on g.id = c.group_id where g.campaign_id = ${campaignId} order by c.group_id, c.id`),
  ).map((row) => {
    const entry = labelTypeEntry(row.label_type)
    const family = entry?.family ?? 'undefined'
    return { id: row.id, groupId: row.group_id, labelType: row.label_type, task: entry?.task ?? 'undefined labelType', family, enforces: entry !== undefined && !NON_ENFORCING_FAMILIES.has(entry.family) }
  })
  const rewards = rowsOf<{ sbt_id: number; title: string; group_id: string }>(
    await db.execute(sql`select r.sbt_id, r.title, r.group_id from sbt_rewards r join sbt_credential_groups g on g.id = r.group_id where g.campaign_id = ${campaignId} order by r.sbt_id`),
  ).map((row) => {
    const group = credentials.filter((credential) => credential.groupId === row.group_id)
    return { sbtId: row.sbt_id, title: row.title, groupId: row.group_id, farmable: group.every((credential) => !credential.enforces) }
  })
  return { campaignId, credentials, farmableCredentialIds: credentials.filter((credential) => !credential.enforces).map((credential) => credential.id), rewards }
}
