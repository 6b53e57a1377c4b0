import { t } from 'elysia'

/** The `:id` path parameter of every resource route. Identifiers are short; anything longer is refused unread. */
export const IdParams = t.Object({ id: t.String({ maxLength: 64 }) })
