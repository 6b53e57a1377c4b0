import { t, type Static } from 'elysia'
import { PageLimitQuery } from '../../lib/pagination.ts'

/** An allowlist entry activates this long after registration, on the organization's clock. */
export const ALLOWLIST_TIMELOCK_MS = 24 * 3600 * 1000

export const NetworkSchema = t.Union([t.Literal('sui'), t.Literal('tron')], { description: 'sui (USDC) or tron (USDT)' })

export const CreateAllowlistEntryBody = t.Object(
  {
    network: NetworkSchema,
    address: t.String({ maxLength: 100, description: 'Sui: 0x followed by 64 hex digits (short forms refused); Tron: base58check with version byte 0x41' }),
    label: t.Optional(t.String({ maxLength: 200, description: 'Your own name for the destination' })),
  },
  { additionalProperties: false },
)

export const AllowlistEntry = t.Object(
  {
    id: t.String({ examples: ['alw_0192f0c1a2b37c4d8e9f0a1b2c3d4e5f'] }),
    accountId: t.String(),
    network: NetworkSchema,
    address: t.String({ description: 'Canonical form: Sui addresses in lower case' }),
    label: t.Union([t.String(), t.Null()]),
    state: t.Union([t.Literal('registered'), t.Literal('active'), t.Literal('removed')], {
      description: 'registered until activatesAt (24 h after registration on the organization\'s clock), then active (event treasury.allowlist.activated); removed on request',
    }),
    activatesAt: t.String({ format: 'date-time' }),
    activatedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    removedAt: t.Union([t.String({ format: 'date-time' }), t.Null()]),
    createdAt: t.String({ format: 'date-time' }),
  },
  { title: 'AllowlistEntry' },
)

export const ListAllowlistQuery = t.Object(
  {
    after: t.Optional(t.String({ maxLength: 64, description: 'An entry id: the page starts after it' })),
    limit: PageLimitQuery,
  },
  { additionalProperties: false },
)

export const AllowlistEntryList = t.Object({ entries: t.Array(AllowlistEntry), hasMore: t.Boolean() }, { title: 'AllowlistEntryList' })

export type CreateAllowlistEntryInput = Static<typeof CreateAllowlistEntryBody>
export type AllowlistEntryView = Static<typeof AllowlistEntry>
