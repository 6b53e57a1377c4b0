import { index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core'

/**
 * The operator audit trail: one row per action taken through the operator API, whether it changed
 * something or was refused. Written in the same transaction as the change it records (a refused
 * action on its own), so the trail never claims an action that did not happen nor misses one that did.
 */
export const operatorActions = pgTable(
  'operator_actions',
  {
    id: text('id').primaryKey(),
    /** The name the operator gave (the console asks for it before each action). */
    operator: text('operator').notNull(),
    /** The first 16 hex digits of the SHA-256 of the operator token used: which token, never the token. */
    tokenFingerprint: text('token_fingerprint').notNull(),
    /** What was done, e.g. `withdrawal.approve`. */
    action: text('action').notNull(),
    targetId: text('target_id').notNull(),
    /** The organization the target belongs to; null for platform-wide targets. */
    orgId: text('org_id'),
    /** `succeeded` or `refused`. */
    outcome: text('outcome', { enum: ['succeeded', 'refused'] }).notNull(),
    /** The error code of a refused action. */
    errorCode: text('error_code'),
    /** What was asked (the reason of a rejection, and so on). */
    detail: jsonb('detail').$type<Record<string, unknown>>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true, mode: 'date' }).notNull(),
  },
  (table) => [index('operator_actions_target_idx').on(table.targetId), index('operator_actions_org_idx').on(table.orgId, table.id)],
)
