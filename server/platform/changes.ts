/**
 * What instances tell each other after a change that lives in a cache (a key, an organization's
 * settings, a sandbox clock), sent with Postgres NOTIFY on one channel.
 */
export type ChangeNotice = { kind: 'key'; id: string } | { kind: 'org'; id: string } | { kind: 'clock'; id: string }

export const CHANGE_CHANNEL = 'kassa_changes'
