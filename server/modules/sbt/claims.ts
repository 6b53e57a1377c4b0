import { sql } from 'drizzle-orm'
import { base64 } from '@scure/base'
import type { Database } from '../../../db/client.ts'
import { randomToken } from '../../lib/hash.ts'
import { setChainFact, type ChainReader } from './chain-reader.ts'
import { SbtError, invalidParameter } from './envelope.ts'
import { transactionDigest, type Rail, type SandboxMintChain, type SponsoredTransaction } from './mint-chain.ts'
import type { SignedInUser } from './user-auth.ts'

export const CLAIM_ELIGIBLE = 2
export const CLAIM_MINTING = 3
export const CLAIM_CLAIMED = 4
export const CLAIM_MISSED = 5

export interface ClaimAnswer {
  sbtId: number
  claimType: number
  transaction: SponsoredTransaction
}

export interface CheckAnswer {
  sbtId: number
  claimType: number
  txDigest: string
  /** `executed`, `failed`, or `pending` while the transaction may still execute. */
  mint: 'executed' | 'failed' | 'pending'
}

function rowsOf<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}

export function parseSbtId(value: unknown): number {
  if (!Number.isSafeInteger(value) || (value as number) < 1) throw invalidParameter('sbtId', 'must be a positive integer')
  return value as number
}

export class ClaimService {
  constructor(
    private readonly db: Database,
    private readonly chain: ChainReader,
    private readonly mints: SandboxMintChain | undefined,
    private readonly nowMs: () => number,
  ) {}

  /**
   * A claim trusts the stored results: every credential of the reward's group needs a row with
   * status 1 for the user (any number of them), and nothing is re-verified live, so a user who
   * undid a task after verifying it can still claim. The claim record moves to 3 (minting) in the
   * same transaction that records the built mint; a record at 3 or 4 refuses a second one.
   */
  async claim(rail: Rail, user: SignedInUser, sbtId: number): Promise<ClaimAnswer> {
    const [reward] = rowsOf<{ sbt_id: number; group_id: string }>(await this.db.execute(sql`select sbt_id, group_id from sbt_rewards where sbt_id = ${sbtId}`))
    if (reward === undefined) throw new SbtError('reward_not_found', `No SBT reward ${sbtId}`)
    const groupCredentials = rowsOf<{ id: string; satisfied: boolean }>(
      await this.db.execute(sql`
        select c.id, exists (select 1 from sbt_credential_results x where x.user_id = ${user.id} and x.credential_id = c.id and x.status = 1) as satisfied
        from sbt_credentials c where c.group_id = ${reward.group_id} order by c.id`),
    )
    if (groupCredentials.length === 0) throw new SbtError('not_eligible', `SBT ${sbtId}'s group has no credentials; nothing can make it claimable`)
    const missing = groupCredentials.filter((credential) => !credential.satisfied).map((credential) => credential.id)
    if (missing.length > 0) throw new SbtError('not_eligible', `Credentials not yet verified: ${missing.join(', ')}`)
    if (this.mints === undefined) throw new SbtError('chain_unavailable', 'No mint chain is configured on this deployment')
    const sender = rail === 'sui' ? user.suiAddress : user.bindings.evm
    if (sender === undefined || (rail === 'evm' && !/^0x[0-9a-fA-F]{40}$/.test(sender))) throw new SbtError('wallet_not_bound', 'The EVM rail needs a bound EVM wallet (0x and 40 hex digits)')
    const mints = this.mints
    return this.db.transaction(async (tx) => {
      await tx.execute(sql`insert into sbt_claims (user_id, sbt_id, claim_type) values (${user.id}, ${sbtId}, ${CLAIM_ELIGIBLE}) on conflict (user_id, sbt_id) do nothing`)
      const [record] = rowsOf<{ claim_type: number }>(await tx.execute(sql`select claim_type from sbt_claims where user_id = ${user.id} and sbt_id = ${sbtId} for update`))
      if (record!.claim_type === CLAIM_CLAIMED) throw new SbtError('already_claimed', `SBT ${sbtId} is claimed already`)
      if (record!.claim_type === CLAIM_MINTING) throw new SbtError('claim_in_progress', `SBT ${sbtId} is being minted; confirm it with POST /sui/sbt/claim/check`)
      const now = this.nowMs()
      const transaction = mints.build(rail, sender.toLowerCase(), sbtId, now, randomToken(16))
      await tx.execute(sql`
        insert into sbt_mints (digest, rail, user_id, sbt_id, tx_bytes, status, expires_at)
        values (${transaction.digest}, ${rail}, ${user.id}, ${sbtId}, ${transaction.txBytes}, 'built', ${transaction.expiresAt})`)
      await tx.execute(sql`update sbt_claims set claim_type = ${CLAIM_MINTING}, rail = ${rail}, tx_digest = ${transaction.digest}, updated_at = ${new Date(now).toISOString()} where user_id = ${user.id} and sbt_id = ${sbtId}`)
      return { sbtId, claimType: CLAIM_MINTING, transaction }
    })
  }

  /**
   * Confirms a mint by reading the chain live: the SBT held at the address (and the transaction
   * executed) moves the record 3 → 4; a transaction that failed or expired unexecuted moves it
   * 3 → 5 (missed), from where the user may claim again, since nothing was minted. While the
   * transaction may still execute, the record stays at 3.
   */
  async check(user: SignedInUser, sbtId: number): Promise<CheckAnswer> {
    const [record] = rowsOf<{ claim_type: number; tx_digest: string | null; rail: Rail | null }>(
      await this.db.execute(sql`select claim_type, tx_digest, rail from sbt_claims where user_id = ${user.id} and sbt_id = ${sbtId}`),
    )
    if (record === undefined || record.tx_digest === null) throw new SbtError('claim_not_found', `No claim of SBT ${sbtId} by this user`)
    const [mint] = rowsOf<{ status: string; expires_at: Date | string; tx_bytes: string }>(await this.db.execute(sql`select status, expires_at, tx_bytes from sbt_mints where digest = ${record.tx_digest}`))
    if (record.claim_type === CLAIM_CLAIMED) return { sbtId, claimType: CLAIM_CLAIMED, txDigest: record.tx_digest, mint: 'executed' }
    // The SBT is looked for where the mint sends it: the transaction's sender (the wallet bound at claim time).
    const holder = mint === undefined ? user.suiAddress : (JSON.parse(new TextDecoder().decode(base64.decode(mint.tx_bytes))) as { sender: string }).sender
    const held = (await this.chain.readFact(record.rail ?? 'sui', holder, `sbt:${sbtId}`)) >= 1n
    let claimType = record.claim_type
    let state: CheckAnswer['mint'] = 'pending'
    if (mint?.status === 'executed' && held) {
      claimType = CLAIM_CLAIMED
      state = 'executed'
    } else if (mint === undefined || mint.status === 'failed' || new Date(mint.expires_at).getTime() <= this.nowMs()) {
      claimType = CLAIM_MISSED
      state = 'failed'
    }
    if (claimType !== record.claim_type && record.claim_type === CLAIM_MINTING) {
      await this.db.execute(sql`update sbt_claims set claim_type = ${claimType}, updated_at = ${new Date(this.nowMs()).toISOString()} where user_id = ${user.id} and sbt_id = ${sbtId} and claim_type = ${CLAIM_MINTING}`)
      if (state === 'failed' && mint?.status === 'built') await this.db.execute(sql`update sbt_mints set status = 'failed' where digest = ${record.tx_digest}`)
    }
    return { sbtId, claimType, txDigest: record.tx_digest, mint: state }
  }

  /**
   * The sandbox chain executes a submitted mint: both signatures checked over the transaction
   * bytes, once, before it expires; the SBT then shows on chain at the sender's address.
   */
  async executeOnSandbox(rawTxBytes: unknown, userSignature: unknown, sponsorSignature: unknown): Promise<{ digest: string; status: 'executed' }> {
    const mints = this.mints
    if (mints === undefined) throw new SbtError('chain_unavailable', 'This deployment has no sandbox chain')
    if (typeof rawTxBytes !== 'string') throw invalidParameter('txBytes', 'must be the base64 transaction bytes a claim answered')
    if (typeof userSignature !== 'string') throw invalidParameter('userSignature', "must be the sender's signature over the transaction")
    if (typeof sponsorSignature !== 'string') throw invalidParameter('sponsorSignature', "must be the sponsor's signature a claim answered")
    let bytes: Uint8Array
    try {
      bytes = base64.decode(rawTxBytes)
    } catch {
      throw invalidParameter('txBytes', 'must be base64')
    }
    let payload: { chain: string; sender: string; sponsor: string; sbtId: number }
    try {
      payload = JSON.parse(new TextDecoder().decode(bytes))
    } catch {
      throw invalidParameter('txBytes', 'is not a sandbox chain transaction')
    }
    const rail: Rail = payload.chain === 'evm-sandbox' ? 'evm' : 'sui'
    const digest = transactionDigest(rail, bytes)
    const [mint] = rowsOf<{ status: string; expires_at: Date | string; tx_bytes: string }>(await this.db.execute(sql`select status, expires_at, tx_bytes from sbt_mints where digest = ${digest}`))
    if (mint === undefined || mint.tx_bytes !== rawTxBytes) throw new SbtError('claim_not_found', 'No such transaction was built')
    if (mint.status !== 'built') throw new SbtError('claim_in_progress', `The transaction is ${mint.status} already`)
    if (new Date(mint.expires_at).getTime() <= this.nowMs()) throw new SbtError('invalid_parameter', 'The transaction has expired')
    if (!mints.signaturesValid(rail, bytes, payload.sender, userSignature, sponsorSignature)) {
      throw new SbtError('invalid_signature', 'The sender and sponsor signatures must both verify over the transaction bytes')
    }
    return this.db.transaction(async (tx) => {
      await tx.execute(sql`update sbt_mints set status = 'executed' where digest = ${digest}`)
      await setChainFact(tx, rail, payload.sender, `sbt:${payload.sbtId}`, 1n)
      return { digest, status: 'executed' as const }
    })
  }
}
