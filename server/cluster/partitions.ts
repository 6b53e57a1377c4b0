/**
 * Which partition an organization belongs to: FNV-1a (32 bits) of its id's UTF-8 bytes, modulo the
 * partition count. Stable across processes, versions and platforms, so every server of a cluster
 * places an organization in the same partition; the count itself is read from the database
 * (`cluster_settings`) for the same reason.
 */
export function partitionOf(orgId: string, partitionCount: number): number {
  let hash = 0x811c9dc5
  const bytes = /^[\x00-\x7f]*$/.test(orgId) ? undefined : new TextEncoder().encode(orgId)
  const length = bytes === undefined ? orgId.length : bytes.length
  for (let index = 0; index < length; index++) {
    hash ^= bytes === undefined ? orgId.charCodeAt(index) : bytes[index]!
    hash = Math.imul(hash, 0x01000193) >>> 0
  }
  return hash % partitionCount
}
