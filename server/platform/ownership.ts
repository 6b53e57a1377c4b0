import type { AnyColumn, SQL } from 'drizzle-orm'

/**
 * Which organizations this server decides for, as a condition on an organization id column: in
 * cluster mode those of the partitions it serves (docs/scale-out.md, "Cluster mode"); undefined
 * where it decides for all (one server per database). Background passes that move an
 * organization's money add it to the query that finds their due work, so a server neither spends
 * its batch on work it may not do nor leaves its own behind it.
 */
export type OwnedOrganizations = (orgIdColumn: AnyColumn) => SQL | undefined

/** One server decides for every organization. */
export const EVERY_ORGANIZATION: OwnedOrganizations = () => undefined
