import { existsSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { ONBOARDING_ITEMS } from './modules/orgs/model.ts'

/**
 * The operator CLI: a thin client of the operator API (/ops/v1) over HTTP, so it works against any
 * running instance and follows exactly the rules the server enforces.
 *
 *   KASSA_URL       base URL of the server (default http://127.0.0.1:3000)
 *   OPERATOR_TOKEN  the operator token; otherwise read from <DATA_DIR>/operator-token (DATA_DIR
 *                   defaults to .data), where a sandbox server keeps the one it generated
 */

const DEFAULT_URL = 'http://127.0.0.1:3000'
const REQUEST_TIMEOUT_MS = 30_000
const KEY_TYPES = ['secret', 'publishable', 'test'] as const
const ENVIRONMENTS = ['sandbox', 'production'] as const

export const USAGE = `Usage: bun run cli <command>

  orgs create <name>                          onboard an organization (prints its sandbox keys once)
  orgs list [--after <orgId>] [--limit N]     organizations a page at a time (50 by default, 200 at most),
                                              in creation order; hasMore: pass the last id as --after
  orgs show <orgId>                           one organization with its keys (never their secrets)
  keys issue <orgId> <type> <environment>     type: ${KEY_TYPES.join(' | ')}; environment: ${ENVIRONMENTS.join(' | ')}
  keys rotate <keyId> [--overlap-seconds N]   new key; the old one works N more seconds (default 24 h)
  keys revoke <keyId>                         stops the key on the very next request
  onboarding check <orgId> <item...>          mark checklist items done: ${ONBOARDING_ITEMS.join(', ')}
  onboarding sign-off <orgId> <by>            sign off onboarding (every item must be done)
  limits set <orgId> <perMinute|default>      raise the per-key limit, or restore the default
  sbt tokens issue <staging|production> [label]  an SBT data API token (shown once)
  sbt tokens list | sbt tokens revoke <tokenId>
  sbt import <file.json|file.ndjson>          load campaigns, credentials, rewards, users, results, clicks, claims
  sbt farmable <campaignId>                   the campaign's credentials that enforce nothing
  vaults list                                 the vault catalog with terms and buffers
  vaults create <vaultId> --name <name> --min-subscription <amount> --min-redemption <shares>
         [--asset USDC] [--payout direct|claimable] [--subscription-fee-bps N] [--instant-fee-bps N]
         [--platform-fee-bps N] [--deposit-cycle-seconds N] [--redeem-cycle-seconds N]
         [--instant-buffer <amount>] [--daily-rate <fraction>]
  vaults pause|unpause <vaultId>              refuse or allow subscriptions and redemptions
  vaults nav <vaultId> <price> [--daily-rate <fraction>]   set the sandbox venue's NAV
  vaults cycles <vaultId>                     the vault's cycles, newest first
  cycles close|settle|rollback <cycleId>      move a vault cycle on (repeating one changes nothing)
  help                                        this text

Environment: KASSA_URL (default ${DEFAULT_URL}), OPERATOR_TOKEN (default: read from
$DATA_DIR/operator-token, DATA_DIR defaulting to .data).`

export interface CliIo {
  out(text: string): void
  err(text: string): void
}

/** A mistake in the command line: usage goes to stderr and the exit code is 2. */
class UsageError extends Error {
  override name = 'UsageError'
}

/** Anything else that stops the command (server refused, unreachable, no token): exit code 1. */
class CommandError extends Error {
  override name = 'CommandError'
}

interface ApiCall {
  method: 'GET' | 'POST' | 'PATCH'
  path: string
  body?: unknown
}

type Environment = Record<string, string | undefined>

function expectArguments(args: string[], count: number, shape: string): void {
  if (args.length !== count) throw new UsageError(`expected: ${shape}`)
}

function oneOf<T extends string>(value: string, choices: readonly T[], what: string): T {
  if (!(choices as readonly string[]).includes(value)) throw new UsageError(`${what} must be one of ${choices.join(', ')}, got "${value}"`)
  return value as T
}

function wholeNumber(value: string | undefined, what: string, min: number): number {
  if (value === undefined || !/^\d+$/.test(value) || Number(value) < min || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`${what} must be a whole number of at least ${min}, got "${value ?? ''}"`)
  }
  return Number(value)
}

/**
 * The options of a command line, `--name value` or `--name=value`, by name; an option not in
 * `names` is a usage error naming the command's `shape`. A value left out reads as undefined.
 */
function readOptions(args: string[], names: readonly string[], shape: string): Map<string, string | undefined> {
  const options = new Map<string, string | undefined>()
  for (let index = 0; index < args.length; index++) {
    const arg = args[index]!
    const equals = arg.indexOf('=')
    const name = equals === -1 ? arg : arg.slice(0, equals)
    if (!names.includes(name)) throw new UsageError(`unknown option "${arg}"; expected: ${shape}`)
    options.set(name, equals === -1 ? args[++index] : arg.slice(equals + 1))
  }
  return options
}

/** The path segment for an id typed by a person: encoded, so a stray slash cannot reach another route. */
function segment(id: string): string {
  return encodeURIComponent(id)
}

/** Turns a command line into the one operator API call it stands for. */
export function planCall(argv: string[]): ApiCall {
  const [group, action, ...args] = argv
  const command = `${group ?? ''} ${action ?? ''}`.trim()
  switch (command) {
    case 'orgs create': {
      if (args.length === 0 || args.join(' ').trim() === '') throw new UsageError('expected: orgs create <name>')
      return { method: 'POST', path: '/ops/v1/orgs', body: { name: args.join(' ') } }
    }
    case 'orgs list': {
      // A page at a time, as the API answers: the printed hasMore says whether to ask for the next.
      const shape = 'orgs list [--after <orgId>] [--limit N]'
      const options = readOptions(args, ['--after', '--limit'], shape)
      const query = new URLSearchParams()
      if (options.has('--after')) {
        const after = options.get('--after')
        if (after === undefined || after === '') throw new UsageError(`--after needs an organization id; expected: ${shape}`)
        query.set('after', after)
      }
      if (options.has('--limit')) query.set('limit', String(wholeNumber(options.get('--limit'), '--limit', 1)))
      const search = query.toString()
      return { method: 'GET', path: search === '' ? '/ops/v1/orgs' : `/ops/v1/orgs?${search}` }
    }
    case 'orgs show':
      expectArguments(args, 1, 'orgs show <orgId>')
      return { method: 'GET', path: `/ops/v1/orgs/${segment(args[0]!)}` }
    case 'keys issue': {
      expectArguments(args, 3, 'keys issue <orgId> <type> <environment>')
      const type = oneOf(args[1]!, KEY_TYPES, 'type')
      const environment = oneOf(args[2]!, ENVIRONMENTS, 'environment')
      return { method: 'POST', path: `/ops/v1/orgs/${segment(args[0]!)}/keys`, body: { type, environment } }
    }
    case 'keys rotate': {
      const shape = 'keys rotate <keyId> [--overlap-seconds N]'
      const [keyId, ...rest] = args
      if (keyId === undefined || keyId.startsWith('--')) throw new UsageError(`expected: ${shape}`)
      const options = readOptions(rest, ['--overlap-seconds'], shape)
      const body = options.has('--overlap-seconds') ? { overlapSeconds: wholeNumber(options.get('--overlap-seconds'), '--overlap-seconds', 0) } : {}
      return { method: 'POST', path: `/ops/v1/keys/${segment(keyId)}/rotate`, body }
    }
    case 'keys revoke':
      expectArguments(args, 1, 'keys revoke <keyId>')
      return { method: 'POST', path: `/ops/v1/keys/${segment(args[0]!)}/revoke` }
    case 'onboarding check': {
      const [orgId, ...items] = args
      if (orgId === undefined || items.length === 0) throw new UsageError('expected: onboarding check <orgId> <item...>')
      const checked = Object.fromEntries(items.map((item) => [oneOf(item, ONBOARDING_ITEMS, 'checklist item'), true]))
      return { method: 'PATCH', path: `/ops/v1/orgs/${segment(orgId)}/onboarding`, body: { items: checked } }
    }
    case 'onboarding sign-off': {
      const [orgId, ...by] = args
      if (orgId === undefined || by.length === 0) throw new UsageError('expected: onboarding sign-off <orgId> <by>')
      return { method: 'POST', path: `/ops/v1/orgs/${segment(orgId)}/onboarding/sign-off`, body: { signedOffBy: by.join(' ') } }
    }
    case 'limits set': {
      expectArguments(args, 2, 'limits set <orgId> <perMinute|default>')
      const rateLimitPerMinute = args[1] === 'default' ? null : wholeNumber(args[1], 'perMinute', 1)
      return { method: 'PATCH', path: `/ops/v1/orgs/${segment(args[0]!)}/limits`, body: { rateLimitPerMinute } }
    }
    case 'sbt tokens': {
      const [verb, ...rest] = args
      if (verb === 'list' && rest.length === 0) return { method: 'GET', path: '/ops/v1/sbt/tokens' }
      if (verb === 'revoke' && rest.length === 1) return { method: 'POST', path: `/ops/v1/sbt/tokens/${segment(rest[0]!)}/revoke` }
      if (verb === 'issue' && rest.length >= 1) {
        const environment = oneOf(rest[0]!, ['staging', 'production'] as const, 'environment')
        return { method: 'POST', path: '/ops/v1/sbt/tokens', body: { environment, label: rest.slice(1).join(' ') } }
      }
      throw new UsageError('expected: sbt tokens issue <staging|production> [label] | sbt tokens list | sbt tokens revoke <tokenId>')
    }
    case 'sbt import': {
      expectArguments(args, 1, 'sbt import <file.json|file.ndjson>')
      const file = args[0]!
      if (!existsSync(file)) throw new UsageError(`no such file: ${file}`)
      const text = readFileSync(file, 'utf8')
      if (file.endsWith('.ndjson') || file.endsWith('.jsonl')) return { method: 'POST', path: '/ops/v1/sbt/import', body: { ndjson: text } }
      try {
        return { method: 'POST', path: '/ops/v1/sbt/import', body: JSON.parse(text) }
      } catch {
        throw new UsageError(`${file} is not JSON (name an NDJSON file .ndjson)`)
      }
    }
    case 'sbt farmable':
      expectArguments(args, 1, 'sbt farmable <campaignId>')
      return { method: 'GET', path: `/ops/v1/sbt/campaigns/${segment(args[0]!)}/farmable` }
    case 'vaults list':
      expectArguments(args, 0, 'vaults list')
      return { method: 'GET', path: '/ops/v1/vaults' }
    case 'vaults create':
      return planVaultCreate(args)
    case 'vaults pause':
    case 'vaults unpause':
      expectArguments(args, 1, `vaults ${action} <vaultId>`)
      return { method: 'POST', path: `/ops/v1/vaults/${segment(args[0]!)}/${action}` }
    case 'vaults nav': {
      const shape = 'vaults nav <vaultId> <price> [--daily-rate <fraction>]'
      const [vaultId, price, ...rest] = args
      if (vaultId === undefined || price === undefined || price.startsWith('--')) throw new UsageError(`expected: ${shape}`)
      const options = readOptions(rest, ['--daily-rate'], shape)
      const dailyRate = options.get('--daily-rate')
      return { method: 'POST', path: `/ops/v1/vaults/${segment(vaultId)}/nav`, body: dailyRate === undefined ? { price } : { price, dailyRate } }
    }
    case 'vaults cycles':
      expectArguments(args, 1, 'vaults cycles <vaultId>')
      return { method: 'GET', path: `/ops/v1/vaults/${segment(args[0]!)}/cycles` }
    case 'cycles close':
    case 'cycles settle':
    case 'cycles rollback':
      expectArguments(args, 1, `cycles ${action} <cycleId>`)
      return { method: 'POST', path: `/ops/v1/vault-cycles/${segment(args[0]!)}/${action}` }
    default:
      throw new UsageError(command === '' ? 'no command given' : `unknown command "${command}"`)
  }
}

const VAULT_CREATE_SHAPE = 'vaults create <vaultId> --name <name> --min-subscription <amount> --min-redemption <shares> [options]'

/** `vaults create`: the options become the operator API's body; amounts stay decimal strings. */
function planVaultCreate(args: string[]): ApiCall {
  const [vaultId, ...rest] = args
  if (vaultId === undefined || vaultId.startsWith('--')) throw new UsageError(`expected: ${VAULT_CREATE_SHAPE}`)
  const text = { '--name': 'name', '--asset': 'asset', '--min-subscription': 'minSubscription', '--min-redemption': 'minRedemption', '--instant-buffer': 'instantBuffer', '--daily-rate': 'dailyRate' } as const
  const numbers = {
    '--subscription-fee-bps': 'subscriptionFeeBps',
    '--instant-fee-bps': 'instantRedemptionFeeBps',
    '--platform-fee-bps': 'platformFeeBps',
    '--deposit-cycle-seconds': 'depositCycleSeconds',
    '--redeem-cycle-seconds': 'redeemCycleSeconds',
  } as const
  const options = readOptions(rest, [...Object.keys(text), ...Object.keys(numbers), '--payout'], VAULT_CREATE_SHAPE)
  const body: Record<string, unknown> = { vaultId, asset: 'USDC' }
  for (const [option, field] of Object.entries(text)) {
    if (!options.has(option)) continue
    const value = options.get(option)
    if (value === undefined || value === '') throw new UsageError(`${option} needs a value; expected: ${VAULT_CREATE_SHAPE}`)
    body[field] = value
  }
  for (const [option, field] of Object.entries(numbers)) if (options.has(option)) body[field] = wholeNumber(options.get(option), option, 0)
  if (options.has('--payout')) body.payoutMode = oneOf(options.get('--payout') ?? '', ['direct', 'claimable'] as const, '--payout')
  for (const required of ['name', 'minSubscription', 'minRedemption']) if (body[required] === undefined) throw new UsageError(`expected: ${VAULT_CREATE_SHAPE}`)
  return { method: 'POST', path: '/ops/v1/vaults', body }
}

function baseUrl(env: Environment): URL {
  const raw = env.KASSA_URL && env.KASSA_URL !== '' ? env.KASSA_URL : DEFAULT_URL
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new CommandError(`KASSA_URL must be an http:// or https:// URL, got "${raw}"`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new CommandError(`KASSA_URL must be an http:// or https:// URL, got "${raw}"`)
  return url
}

function operatorToken(env: Environment): string {
  if (env.OPERATOR_TOKEN && env.OPERATOR_TOKEN !== '') return env.OPERATOR_TOKEN
  const path = join(resolve(env.DATA_DIR && env.DATA_DIR !== '' ? env.DATA_DIR : '.data'), 'operator-token')
  if (existsSync(path)) {
    const token = readFileSync(path, 'utf8').trim()
    if (token !== '') return token
  }
  throw new CommandError(`no operator token: set OPERATOR_TOKEN, or run where ${path} exists`)
}

async function send(call: ApiCall, env: Environment): Promise<unknown> {
  const base = baseUrl(env)
  // A base URL with a path (a server behind a path-routing proxy) keeps that path in front.
  const url = new URL(`${base.pathname.replace(/\/$/, '')}${call.path}`, base)
  const headers: Record<string, string> = { authorization: `Bearer ${operatorToken(env)}`, accept: 'application/json' }
  if (call.body !== undefined) headers['content-type'] = 'application/json'
  let response: Response
  try {
    response = await fetch(url, {
      method: call.method,
      headers,
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    })
  } catch (error) {
    throw new CommandError(`cannot reach ${url.origin}: ${(error as Error).message}`)
  }
  const text = await response.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // Not JSON: shown as it came.
  }
  if (!response.ok) {
    const error = (body as { error?: { code?: string; message?: string; field?: string; requestId?: string } }).error
    if (error?.code !== undefined) {
      const field = error.field ? ` (field ${error.field})` : ''
      throw new CommandError(`${response.status} ${error.code}: ${error.message}${field} [request ${error.requestId}]`)
    }
    throw new CommandError(`${response.status} ${response.statusText}: ${text.slice(0, 500)}`)
  }
  return body
}

/** Runs one command line; answers the process exit code (0 done, 1 failed, 2 usage). */
export async function runCli(argv: string[], env: Environment = process.env, io: CliIo = defaultIo): Promise<number> {
  if (argv.length === 0 || ['help', '--help', '-h'].includes(argv[0]!)) {
    if (argv.length === 0) {
      io.err(USAGE)
      return 2
    }
    io.out(USAGE)
    return 0
  }
  try {
    const result = await send(planCall(argv), env)
    io.out(JSON.stringify(result, null, 2))
    return 0
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`kassa cli: ${error.message}\n\n${USAGE}`)
      return 2
    }
    if (error instanceof CommandError) {
      io.err(`kassa cli: ${error.message}`)
      return 1
    }
    throw error
  }
}

const defaultIo: CliIo = {
  out: (text) => console.log(text),
  err: (text) => console.error(text),
}

if (import.meta.main) {
  process.exitCode = await runCli(process.argv.slice(2))
}
