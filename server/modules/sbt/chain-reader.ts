import { and, eq, sql } from 'drizzle-orm'
import type { Database, Executor } from '../../../db/client.ts'
import { sbtChainFacts } from '../../../db/schema/index.ts'
import type { Chain } from './registry.ts'

/** The chains a reader answers for: the on-chain families' chains, and the EVM rail of claims. */
export type ReadableChain = Chain | 'evm'

/**
 * What on-chain verifiers and the claim check read: one whole number per (chain, address, fact),
 * where a fact names what is measured (`balance:USDC`, `txcount`, `sbt:12`, `usd:lockdrop`). A
 * production deployment plugs in readers over the chains' RPC nodes behind this interface.
 */
export interface ChainReader {
  readFact(chain: ReadableChain, address: string, fact: string): Promise<bigint>
}

export const FACT_PATTERN = /^[A-Za-z0-9:_.-]{1,100}$/

/** The sandbox chain: facts kept in Postgres, set by operators (`/ops/v1/sbt/sandbox/chain-facts`) and tests. */
export class SandboxChainReader implements ChainReader {
  constructor(private readonly db: Database) {}

  async readFact(chain: ReadableChain, address: string, fact: string): Promise<bigint> {
    const [row] = await this.db
      .select({ amount: sbtChainFacts.amount })
      .from(sbtChainFacts)
      .where(and(eq(sbtChainFacts.chain, chain), eq(sbtChainFacts.address, address), eq(sbtChainFacts.fact, fact)))
    return row === undefined ? 0n : BigInt(row.amount)
  }
}

export async function setChainFact(executor: Executor, chain: ReadableChain, address: string, fact: string, amount: bigint): Promise<void> {
  await executor
    .insert(sbtChainFacts)
    .values({ chain, address, fact, amount: amount.toString() })
    .onConflictDoUpdate({ target: [sbtChainFacts.chain, sbtChainFacts.address, sbtChainFacts.fact], set: { amount: sql`excluded.amount` } })
}
