import { compactVerify, createLocalJWKSet, type JSONWebKeySet } from 'jose'
import { bodyOf, decimalsOf, hashOfBody, minorOf, type SignedStatement } from './document.ts'

/**
 * Offline verification of a chain of Kassa statements (`import { verifyStatementChain } from
 * 'kassa/statements/verify'`): give it an account's statements in one asset, as the API served
 * them, and the platform's JWKS (`GET /.well-known/jwks.json`, fetched once and kept). Nothing here
 * calls the network. Every problem names the statement, and the line where a line is at fault.
 */
export type ChainCheck = 'signature' | 'hash' | 'link' | 'gap' | 'lines' | 'invariant' | 'chain'

export interface ChainProblem {
  statementId: string
  businessDate: string
  check: ChainCheck
  message: string
  /** The line at fault (0-based) and its movement, for `lines`. */
  line?: number
  movementId?: string
}

export interface ChainReport {
  ok: boolean
  /** How many statements were checked. */
  statements: number
  problems: ChainProblem[]
}

export interface ChainOptions {
  /**
   * The chain starts at the account's first statement: the first one must have no previous hash
   * and open at zero. Off by default, so that any stretch of days can be checked.
   */
  fromFirst?: boolean
}

const ONE_DAY_MS = 86_400_000

function nextDate(date: string): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + ONE_DAY_MS).toISOString().slice(0, 10)
}

export async function verifyStatementChain(statements: readonly SignedStatement[], jwks: JSONWebKeySet, options: ChainOptions = {}): Promise<ChainReport> {
  const keys = createLocalJWKSet(jwks)
  const problems: ChainProblem[] = []
  const ordered = [...statements].sort((a, b) => (a.businessDate < b.businessDate ? -1 : a.businessDate > b.businessDate ? 1 : 0))
  let previous: SignedStatement | undefined
  for (const statement of ordered) {
    const problem = (check: ChainCheck, message: string, extra: Partial<ChainProblem> = {}) =>
      problems.push({ statementId: statement.id, businessDate: statement.businessDate, check, message, ...extra })

    const hash = hashOfBody(bodyOf(statement))
    if (hash !== statement.hash) problem('hash', `the statement's content hashes to ${hash}, not to its hash ${statement.hash}: it was changed after it was sealed`)
    try {
      const { payload, protectedHeader } = await compactVerify(statement.signature, keys, { algorithms: ['EdDSA', 'Ed25519'] })
      if (new TextDecoder().decode(payload) !== statement.hash) problem('signature', 'the signature is valid but signs another hash')
      if (protectedHeader.kid !== statement.keyId) problem('signature', `signed by key ${String(protectedHeader.kid)}, but the statement names ${statement.keyId}`)
    } catch (error) {
      problem('signature', `the signature does not verify against the JWKS: ${error instanceof Error ? error.message : String(error)}`)
    }

    checkLines(statement, problem)

    if (!statement.invariantOk) problem('invariant', 'the statement itself records that its balances did not agree with the ledger (invariantOk is false)')
    if (statement.closingBalance !== statement.ledgerBalanceAtCutoff) {
      problem('invariant', `closing balance ${statement.closingBalance} differs from the ledger at the cut-off, ${statement.ledgerBalanceAtCutoff}`)
    }

    if (previous === undefined) {
      if (options.fromFirst && (statement.previousHash !== null || minorOf(statement.openingBalance, decimalsOf(statement.openingBalance)) !== 0n)) {
        problem('link', 'the first statement of an account must have no previous hash and open at zero')
      }
    } else {
      if (statement.accountId !== previous.accountId || statement.asset !== previous.asset) {
        problem('chain', `the chain mixes ${previous.accountId} ${previous.asset} with ${statement.accountId} ${statement.asset}`)
      }
      if (statement.businessDate === previous.businessDate) problem('gap', `two statements for business date ${statement.businessDate}`)
      else if (statement.businessDate !== nextDate(previous.businessDate)) {
        problem('gap', `no statement between ${previous.businessDate} and ${statement.businessDate}`)
      }
      if (statement.periodStart !== previous.periodEnd) problem('gap', `the period starts at ${statement.periodStart}, not where the previous one ended (${previous.periodEnd})`)
      if (statement.previousHash !== previous.hash || statement.previousStatementId !== previous.id) {
        problem('link', `previousHash does not name the previous statement ${previous.id} (hash ${previous.hash})`)
      }
      if (statement.openingBalance !== previous.closingBalance) {
        problem('link', `opens at ${statement.openingBalance}, but the previous statement closed at ${previous.closingBalance}`)
      }
    }
    previous = statement
  }
  return { ok: problems.length === 0, statements: ordered.length, problems }
}

/** Opening plus each line's amount gives its balanceAfter, in order, and the last gives the closing balance. */
function checkLines(statement: SignedStatement, problem: (check: ChainCheck, message: string, extra?: Partial<ChainProblem>) => void): void {
  const decimals = decimalsOf(statement.openingBalance)
  let running = minorOf(statement.openingBalance, decimals)
  if (running === undefined) {
    problem('lines', `opening balance ${statement.openingBalance} is not a decimal amount`)
    return
  }
  for (const [index, line] of statement.lines.entries()) {
    const amount = minorOf(line.amount, decimals)
    const after = minorOf(line.balanceAfter, decimals)
    if (amount === undefined || after === undefined) {
      problem('lines', `line ${index + 1} does not hold decimal amounts`, { line: index, movementId: line.movementId })
      return
    }
    if (running + amount !== after) {
      problem('lines', `line ${index + 1} (${line.movementId}): ${line.amount} after a balance of the previous line does not give its balanceAfter ${line.balanceAfter}`, {
        line: index,
        movementId: line.movementId,
      })
    }
    running = after
  }
  const closing = minorOf(statement.closingBalance, decimals)
  if (closing !== running) problem('lines', `the lines end at a balance other than the closing balance ${statement.closingBalance}`)
}
