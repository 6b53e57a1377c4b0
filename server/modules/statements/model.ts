import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'

const Amount = (description: string) => t.String({ description, examples: ['125.500000'] })

export const StatementLine = t.Object(
  {
    movementId: t.String({ description: 'The ledger movement' }),
    kind: t.String({ description: 'What moved the money: transfer, sandbox_funding, payment_capture, deposit_final, …' }),
    reference: t.String({ description: 'The resource that caused it (tr_…, pay_…, a deposit, …)' }),
    bookedAt: t.String({ format: 'date-time', description: "The movement's booking time, which decides its business date" }),
    amount: Amount('Signed decimal: a credit is positive, a debit negative'),
    balanceAfter: Amount('The balance after this line'),
  },
  { title: 'StatementLine' },
)

export const Statement = t.Object(
  {
    object: t.Literal('statement'),
    id: t.String({ examples: ['stmt_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    accountId: t.String(),
    asset: t.String({ examples: ['USDC'] }),
    businessDate: t.String({ format: 'date', description: 'The business date (YYYY-MM-DD) in the organization time zone' }),
    timeZone: t.String({ examples: ['UTC', 'America/New_York'] }),
    cutoffHour: t.Integer({ minimum: 0, maximum: 23, description: 'The business date ends at this local hour; 0 is midnight at the end of the date' }),
    periodStart: t.String({ format: 'date-time', description: 'Inclusive: the previous cut-off' }),
    periodEnd: t.String({ format: 'date-time', description: 'Exclusive: the cut-off' }),
    openingBalance: Amount("The previous statement's closing balance (0 for the first)"),
    closingBalance: Amount('Opening balance plus the lines'),
    ledgerBalanceAtCutoff: Amount("The ledger's total balance of the account at the cut-off, read independently of the lines"),
    invariantOk: t.Boolean({ description: 'openingBalance + lines = closingBalance = ledgerBalanceAtCutoff' }),
    lines: t.Array(StatementLine, { description: 'In booking order' }),
    previousStatementId: t.Union([t.String(), t.Null()]),
    previousHash: t.Union([t.String(), t.Null()], { description: "The hash of the account's previous statement in this asset; null for its first" }),
    keyId: t.String({ description: 'The signing key, a kid of GET /.well-known/jwks.json' }),
    sealedAt: t.String({ format: 'date-time' }),
    hash: t.String({ description: 'SHA-256 (hex) of the canonical JSON of every other field but signature (keys sorted, no whitespace)' }),
    signature: t.String({ description: 'Compact JWS, EdDSA (Ed25519), typ kassa-statement+jws, kid = keyId, whose payload is hash' }),
  },
  { title: 'Statement' },
)

export type StatementView = Static<typeof Statement>

export const StatementList = t.Object({ statements: t.Array(Statement), hasMore: t.Boolean() }, { title: 'StatementList' })

export const ListStatementsQuery = t.Object({
  asset: t.Optional(t.String({ maxLength: 16, description: 'Only this asset' })),
  from: t.Optional(t.String({ maxLength: 10, description: 'First business date, YYYY-MM-DD (inclusive)' })),
  to: t.Optional(t.String({ maxLength: 10, description: 'Last business date, YYYY-MM-DD (inclusive)' })),
  after: t.Optional(t.String({ maxLength: 64, description: 'A statement id: the page starts after it' })),
  limit: PageLimitQuery,
})

export const StatementFormatQuery = t.Object({
  format: t.Optional(t.String({ maxLength: 8, description: 'json, csv or pdf; overrides the Accept header' })),
})

export const BusinessDayBody = t.Object(
  {
    timeZone: t.String({ maxLength: 64, description: 'An IANA time zone (Europe/Berlin, America/New_York, UTC)' }),
    cutoffHour: t.Integer({ description: 'The local hour business dates end at, 0 to 23; 0 is midnight at the end of the date' }),
  },
  { additionalProperties: false },
)

export const BusinessDay = t.Object(
  {
    orgId: t.String(),
    timeZone: t.String(),
    cutoffHour: t.Integer(),
    nextBusinessDate: t.Union([t.String(), t.Null()], { description: 'The next date to be sealed with these settings; null before the first movement' }),
  },
  { title: 'BusinessDay' },
)

export const Jwks = t.Object(
  {
    keys: t.Array(
      t.Object({ kty: t.String(), crv: t.String(), x: t.String(), kid: t.String(), alg: t.String(), use: t.String() }, { additionalProperties: true }),
    ),
  },
  { title: 'JWKS' },
)

export const SigningKey = t.Object({ kid: t.String(), createdAt: t.String({ format: 'date-time' }), current: t.Boolean() }, { title: 'StatementSigningKey' })
