import { createHash } from 'node:crypto'

/**
 * A statement as it is hashed and signed, and as the API serves it (with `hash` and `signature`
 * beside it). Money is decimal strings in the asset's units; times are ISO 8601 UTC with
 * milliseconds. This file depends on nothing of the server, so the offline verifier can use it.
 */
export interface StatementLine {
  movementId: string
  /** What moved the money (`transfer`, `sandbox_funding`, `payment_capture`, …). */
  kind: string
  /** The resource that caused it (`tr_…`, `pay_…`, a deposit, …). */
  reference: string
  /** The movement's booking time, the one timestamp that decides its business date. */
  bookedAt: string
  /** Signed: a credit is positive, a debit negative. */
  amount: string
  balanceAfter: string
}

export interface StatementBody {
  object: 'statement'
  id: string
  accountId: string
  asset: string
  businessDate: string
  timeZone: string
  cutoffHour: number
  periodStart: string
  periodEnd: string
  openingBalance: string
  closingBalance: string
  /** The ledger's balance of the account at the cut-off, read independently of the lines. */
  ledgerBalanceAtCutoff: string
  /** Opening plus the lines equals closing, and closing equals the ledger at the cut-off. */
  invariantOk: boolean
  lines: StatementLine[]
  previousStatementId: string | null
  /** The `hash` of the account's previous statement in this asset; null for its first. */
  previousHash: string | null
  /** The signing key (`kid` in the JWKS). */
  keyId: string
  sealedAt: string
}

export interface SignedStatement extends StatementBody {
  /** SHA-256 (hex) of the body's canonical JSON. */
  hash: string
  /** A compact JWS (EdDSA, Ed25519) whose payload is `hash`, signed by `keyId`. */
  signature: string
}

/** JSON with object keys sorted at every level and no whitespace: one text for one value. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value)
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  const entries = Object.keys(value as Record<string, unknown>)
    .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`)
  return `{${entries.join(',')}}`
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex')
}

/** The body of a served statement: everything but `hash` and `signature`. */
export function bodyOf(statement: SignedStatement): StatementBody {
  const { hash: _hash, signature: _signature, ...body } = statement
  return body
}

export function hashOfBody(body: StatementBody): string {
  return sha256Hex(canonicalJson(body))
}

/** Minor units of a decimal string with exactly `decimals` places or fewer; undefined when it is not one. */
export function minorOf(text: string, decimals: number): bigint | undefined {
  const match = /^(-)?(\d+)(?:\.(\d+))?$/.exec(text)
  if (!match) return undefined
  const fraction = match[3] ?? ''
  if (fraction.length > decimals) return undefined
  const minor = BigInt(match[2]! + fraction.padEnd(decimals, '0'))
  return match[1] ? -minor : minor
}

/** The number of decimals a decimal string carries (statements write every amount with the asset's). */
export function decimalsOf(text: string): number {
  const point = text.indexOf('.')
  return point < 0 ? 0 : text.length - point - 1
}
