/** The console's command line: flags win over the environment. The token is never printed. */
export interface ConsoleOptions {
  url: string
  token: string
  operator: string
  refreshMs: number
  color: boolean
}

export const HELP = `Kassa operator console

Usage: bun run console [flags]

Flags:
  --url URL          Kassa's address (env KASSA_URL; default http://127.0.0.1:3000)
  --token TOKEN      the operator token (env OPERATOR_TOKEN; prefer the environment:
                     a flag shows in the process list)
  --operator NAME    your name, offered when you approve or reject (env KASSA_OPERATOR)
  --refresh SECONDS  how often lists refresh themselves (default 3)
  --help             this text

Keys:
  1-9, tab           switch screens          ?   help
  q                  quit
  Withdrawals        up/down select, enter detail, a approve, r reject, g refresh, esc back
  Events             p pause/resume, t filter types (exact or ns.*), o filter organization,
                     c clear filters
  Vaults             up/down select, p pause, u unpause (each asks y/n), g refresh
  Cycles             left/right vault, up/down select, c close, s settle, b roll back
                     (each shows its effect and asks y/n; a roll back asks for the vault id)

Colours are off when NO_COLOR is set.
`

export type Parsed = { kind: 'help' } | { kind: 'error'; message: string } | { kind: 'run'; options: ConsoleOptions }

export function parseArgs(argv: readonly string[], env: Record<string, string | undefined>): Parsed {
  const flags = new Map<string, string>()
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index]!
    if (arg === '--help' || arg === '-h') return { kind: 'help' }
    const match = /^--(url|token|operator|refresh)(?:=(.*))?$/.exec(arg)
    if (!match) return { kind: 'error', message: `unknown argument ${arg.startsWith('--token') ? '--token' : JSON.stringify(arg.slice(0, 40))} (see --help)` }
    const value = match[2] ?? argv[++index]
    if (value === undefined) return { kind: 'error', message: `--${match[1]} needs a value` }
    flags.set(match[1]!, value)
  }
  const url = (flags.get('url') ?? env.KASSA_URL ?? 'http://127.0.0.1:3000').replace(/\/+$/, '')
  try {
    const parsed = new URL(url)
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('not http')
  } catch {
    return { kind: 'error', message: `KASSA_URL must be an http(s) address, got ${JSON.stringify(url.slice(0, 80))}` }
  }
  const token = flags.get('token') ?? env.OPERATOR_TOKEN ?? ''
  if (token === '') return { kind: 'error', message: 'no operator token: set OPERATOR_TOKEN (or pass --token)' }
  const refreshSeconds = Number(flags.get('refresh') ?? '3')
  if (!Number.isFinite(refreshSeconds) || refreshSeconds < 0.2 || refreshSeconds > 3600) return { kind: 'error', message: '--refresh must be a number of seconds from 0.2 to 3600' }
  const noColor = env.NO_COLOR !== undefined && env.NO_COLOR !== ''
  return { kind: 'run', options: { url, token, operator: flags.get('operator') ?? env.KASSA_OPERATOR ?? '', refreshMs: Math.round(refreshSeconds * 1000), color: !noColor } }
}
