import { index, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core'
import { organizations } from './platform.ts'

export const accounts = pgTable(
  'accounts',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull().references(() => organizations.id),
    externalId: text('external_id').notNull(),
    type: text('type', { enum: ['individual', 'business'] }).notNull(),
    status: text('status', { enum: ['active', 'frozen'] }).notNull().default('active'),
    metadata: jsonb('metadata').$type<Record<string, string>>().notNull(),
    kycLevel: text('kyc_level'),
    kycVerifiedAt: timestamp('kyc_verified_at', { withTimezone: true, mode: 'date' }),
    kycExpiresAt: timestamp('kyc_expires_at', { withTimezone: true, mode: 'date' }),
    kycAttestationKeyId: text('kyc_attestation_key_id'),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex('accounts_org_external_unique').on(table.orgId, table.externalId),
    index('accounts_org_id_idx').on(table.orgId, table.id),
  ],
)

/** Ed25519 public keys an organization registers to sign KYC attestations for its accounts. */
export const attestationKeys = pgTable(
  'attestation_keys',
  {
    id: text('id').primaryKey(),
    orgId: text('org_id').notNull().references(() => organizations.id),
    publicKeyJwk: jsonb('public_key_jwk').$type<{ kty: 'OKP'; crv: 'Ed25519'; x: string }>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull().defaultNow(),
    revokedAt: timestamp('revoked_at', { withTimezone: true, mode: 'date' }),
  },
  (table) => [index('attestation_keys_org_idx').on(table.orgId)],
)
