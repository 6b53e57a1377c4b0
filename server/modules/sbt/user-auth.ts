import { and, eq, gt, isNull } from 'drizzle-orm'
import type { Database } from '../../../db/client.ts'
import { sbtChallenges, sbtUsers } from '../../../db/schema/index.ts'
import { randomToken } from '../../lib/hash.ts'
import { SbtError, invalidParameter } from './envelope.ts'
import { INTENT_PERSONAL_MESSAGE, normalizeSuiAddress, verifySuiSignature } from './sui.ts'

export const CHALLENGE_LIFETIME_MS = 5 * 60 * 1000

export interface Challenge {
  nonce: string
  message: string
  expiresAt: string
}

/** What a credential or claim request carries to prove the wallet: the challenge it signed and the signature. */
export interface WalletProof {
  address: string
  nonce: string
  signature: string
}

export interface SignedInUser {
  id: number
  suiAddress: string
  bindings: Record<string, string>
  score: number
  streakDays: number
}

export function challengeMessage(address: string, nonce: string, expiresAt: string): string {
  return `Kassa SBT sign-in\nAddress: ${address}\nNonce: ${nonce}\nExpires: ${expiresAt}`
}

/** A fresh invite code: 10 base58 characters, unique by index (a clash is retried by the caller's insert). */
export function newInviteCode(): string {
  return randomToken(8).slice(0, 10)
}

/**
 * End users prove their wallet with a Sui personal-message signature over a server-issued,
 * single-use challenge that expires after five minutes. The first proof of an unknown address
 * creates the user (with the inviter named by the invite code given when asking the challenge).
 */
export class WalletAuth {
  constructor(
    private readonly db: Database,
    private readonly nowMs: () => number = Date.now,
  ) {}

  async challenge(rawAddress: unknown, inviteCode: unknown): Promise<Challenge> {
    const address = normalizeSuiAddress(typeof rawAddress === 'string' ? rawAddress : undefined)
    if (inviteCode !== undefined && inviteCode !== null && (typeof inviteCode !== 'string' || !/^[^\u0000-\u001f\u007f]{1,64}$/.test(inviteCode))) {
      throw invalidParameter('inviteCode', 'must be 1 to 64 printable characters')
    }
    const nonce = randomToken(24)
    const expiresAt = new Date(this.nowMs() + CHALLENGE_LIFETIME_MS)
    const message = challengeMessage(address, nonce, expiresAt.toISOString())
    await this.db.insert(sbtChallenges).values({ nonce, suiAddress: address, message, inviteCode: (inviteCode as string | undefined) ?? null, expiresAt })
    return { nonce, message, expiresAt: expiresAt.toISOString() }
  }

  /** Checks a proof and uses its challenge up; answers the user, created on first sign-in. */
  async signIn(proof: Partial<WalletProof> | undefined): Promise<SignedInUser> {
    const address = normalizeSuiAddress(proof?.address)
    if (typeof proof?.nonce !== 'string' || proof.nonce === '') throw invalidParameter('nonce', 'the nonce of a challenge from POST /auth/challenge is required')
    if (typeof proof.signature !== 'string' || proof.signature === '') throw invalidParameter('signature', 'a Sui personal-message signature (base64) is required')
    const now = new Date(this.nowMs())
    const [challenge] = await this.db
      .select()
      .from(sbtChallenges)
      .where(and(eq(sbtChallenges.nonce, proof.nonce), eq(sbtChallenges.suiAddress, address), isNull(sbtChallenges.usedAt), gt(sbtChallenges.expiresAt, now)))
    if (challenge === undefined) throw new SbtError('challenge_expired', 'The challenge is unknown, used already or expired; ask POST /auth/challenge for a new one')
    if (!verifySuiSignature(proof.signature, INTENT_PERSONAL_MESSAGE, new TextEncoder().encode(challenge.message), address)) {
      throw new SbtError('invalid_signature', 'The signature does not verify for this address and challenge')
    }
    return this.db.transaction(async (tx) => {
      const used = await tx
        .update(sbtChallenges)
        .set({ usedAt: now })
        .where(and(eq(sbtChallenges.nonce, proof.nonce!), isNull(sbtChallenges.usedAt)))
        .returning({ nonce: sbtChallenges.nonce })
      if (used.length === 0) throw new SbtError('challenge_expired', 'The challenge was used already; ask for a new one')
      const [existing] = await tx.select().from(sbtUsers).where(eq(sbtUsers.suiAddress, address))
      if (existing) return toSignedIn(existing)
      let invitedBy: number | null = null
      if (challenge.inviteCode) {
        const [inviter] = await tx.select({ id: sbtUsers.id }).from(sbtUsers).where(eq(sbtUsers.inviteCode, challenge.inviteCode))
        invitedBy = inviter?.id ?? null
      }
      const [created] = await tx
        .insert(sbtUsers)
        .values({ suiAddress: address, inviteCode: newInviteCode(), invitedBy, invitedAt: invitedBy === null ? null : now, createdAt: now })
        .onConflictDoNothing()
        .returning()
      if (created) return toSignedIn(created)
      const [raced] = await tx.select().from(sbtUsers).where(eq(sbtUsers.suiAddress, address))
      return toSignedIn(raced!)
    })
  }
}

function toSignedIn(row: typeof sbtUsers.$inferSelect): SignedInUser {
  return { id: row.id, suiAddress: row.suiAddress, bindings: row.bindings, score: row.score, streakDays: row.streakDays }
}

