import { lookup } from 'node:dns/promises'
import ipaddr from 'ipaddr.js'

/**
 * Which partner URLs the service will call (webhook receivers, issuers' verify APIs). A receiver URL is partner input that makes our servers
 * open connections, so anything that could reach our own network (SSRF) is refused: only HTTPS, only
 * public unicast addresses, and names are judged by every address they resolve to. The same check
 * runs at registration and again at each delivery, on the address actually connected to.
 */
export interface UrlPolicy {
  /** Test-only (`ALLOW_LOOPBACK_WEBHOOKS`): loopback receivers are allowed; every other rule stands. */
  allowLoopback: boolean
  /** Resolves a host name to all its addresses; the system resolver unless a caller supplies one. */
  resolve?: (hostname: string) => Promise<string[]>
}

export class UrlRefused extends Error {
  override name = 'UrlRefused'
}

/** Names that are, or conventionally point at, the machine itself or a cloud metadata service. */
const REFUSED_NAMES = new Set(['localhost', 'metadata.google.internal', 'metadata.goog', 'metadata', 'instance-data', 'instance-data.ec2.internal'])
const REFUSED_SUFFIXES = ['.localhost', '.internal', '.local', '.localdomain', '.home.arpa']

export async function systemResolve(hostname: string): Promise<string[]> {
  const answers = await lookup(hostname, { all: true, verbatim: true })
  return answers.map((answer) => answer.address)
}

export interface CheckedUrl {
  url: URL
  /** The host name without brackets or trailing dots, as used for SNI and the Host header. */
  hostname: string
  /** The addresses the host had at the check, every one of them allowed. */
  addresses: string[]
  /** True when the URL named an address rather than a host name. */
  literal: boolean
}

const NAT64_WELL_KNOWN = ipaddr.IPv6.parseCIDR('64:ff9b::/96')
const IPV4_COMPATIBLE = ipaddr.IPv6.parseCIDR('::/96')

/**
 * The IPv4 addresses an IPv6 address carries, by every embedding that makes a packet to it reach an
 * IPv4 host: IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d, deprecated but still
 * routed by some stacks), IPv4-translated (::ffff:0:a.b.c.d), NAT64 (64:ff9b::a.b.c.d), 6to4
 * (2002:aabb:ccdd::/48) and Teredo (2001:0::/32: its server, and its client stored inverted).
 * Undefined when it carries none. A local-use NAT64 address (64:ff9b:1::/48) places its IPv4
 * address by the operator's prefix length, which cannot be known from outside: it is `opaque`.
 */
function embeddedIPv4(v6: ipaddr.IPv6): ipaddr.IPv4[] | 'opaque' | undefined {
  const bytes = v6.toByteArray()
  const v4 = (from: number, invert = false) => ipaddr.fromByteArray(bytes.slice(from, from + 4).map((byte) => (invert ? byte ^ 0xff : byte))) as ipaddr.IPv4
  if (v6.isIPv4MappedAddress()) return [v6.toIPv4Address()]
  const range = v6.range()
  // :: and ::1 are IPv6's own unspecified and loopback addresses, not embeddings.
  if (range === 'unspecified' || range === 'loopback') return undefined
  if (range === 'rfc6145' || v6.match(NAT64_WELL_KNOWN) || v6.match(IPV4_COMPATIBLE)) return [v4(12)]
  if (range === 'rfc6052') return 'opaque'
  if (range === '6to4') return [v4(2)]
  if (range === 'teredo') return [v4(4), v4(12, true)]
  return undefined
}

/** The reason an address may not be called, or undefined when it may. */
export function refusedAddressReason(address: string, policy: Pick<UrlPolicy, 'allowLoopback'>): string | undefined {
  if (!ipaddr.isValid(address)) return `"${address}" is not an IP address`
  const parsed = ipaddr.parse(address)
  if (parsed.kind() === 'ipv6') {
    const v6 = parsed as ipaddr.IPv6
    // Disguises of IPv4 inside IPv6 are judged as the IPv4 addresses they carry, and only by them.
    const embedded = embeddedIPv4(v6)
    if (embedded === 'opaque') return `${address} is a local-use NAT64 address`
    if (embedded !== undefined) {
      for (const v4 of embedded) {
        const reason = refusedRangeReason(v4, policy)
        if (reason !== undefined) return `${address} carries ${v4.toString()}, ${reason}`
      }
      return undefined
    }
  }
  const reason = refusedRangeReason(parsed, policy)
  return reason === undefined ? undefined : `${address} is ${reason}`
}

function refusedRangeReason(address: ipaddr.IPv4 | ipaddr.IPv6, policy: Pick<UrlPolicy, 'allowLoopback'>): string | undefined {
  const range = address.range()
  if (range === 'unicast') return undefined
  if (range === 'loopback' && policy.allowLoopback) return undefined
  return `a ${range} address`
}

function stripTrailingDots(hostname: string): string {
  return hostname.replace(/\.+$/, '')
}

/**
 * Parses and judges a webhook URL. Throws `UrlRefused` with a reason a partner can act on. A host
 * name that cannot be resolved right now is accepted with no addresses: it is judged again at
 * every delivery, where it must resolve to allowed addresses before anything is sent.
 */
export async function checkWebhookUrl(raw: string, policy: UrlPolicy, options: { requireResolution?: boolean } = {}): Promise<CheckedUrl> {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw new UrlRefused('url must be an absolute https:// URL')
  }
  if (url.protocol !== 'https:') throw new UrlRefused('url must use https')
  if (url.username !== '' || url.password !== '') throw new UrlRefused('url must not carry credentials')
  if (url.hash !== '') throw new UrlRefused('url must not have a fragment')
  // WHATWG parsing has already turned decimal, octal, hex and short IPv4 forms into dotted quads.
  const bracketless = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  const hostname = stripTrailingDots(bracketless.toLowerCase())
  if (hostname === '') throw new UrlRefused('url must name a host')
  if (ipaddr.isValid(hostname)) {
    const reason = refusedAddressReason(hostname, policy)
    if (reason !== undefined) throw new UrlRefused(`url points at a refused address: ${reason}`)
    return { url, hostname, addresses: [ipaddr.parse(hostname).toString()], literal: true }
  }
  if (/^[0-9.]+$/.test(hostname)) throw new UrlRefused('url has a malformed IPv4 address')
  const namedLoopback = REFUSED_NAMES.has(hostname) || REFUSED_SUFFIXES.some((suffix) => hostname.endsWith(suffix))
  if (namedLoopback && !(policy.allowLoopback && (hostname === 'localhost' || hostname.endsWith('.localhost')))) {
    throw new UrlRefused(`url names a local or metadata host (${hostname})`)
  }
  let addresses: string[]
  try {
    addresses = await (policy.resolve ?? systemResolve)(hostname)
  } catch {
    if (options.requireResolution) throw new UrlRefused(`url host ${hostname} does not resolve`)
    return { url, hostname, addresses: [], literal: false }
  }
  if (addresses.length === 0 && options.requireResolution) throw new UrlRefused(`url host ${hostname} does not resolve`)
  for (const address of addresses) {
    const reason = refusedAddressReason(address, policy)
    if (reason !== undefined) throw new UrlRefused(`url host ${hostname} resolves to a refused address: ${reason}`)
  }
  return { url, hostname, addresses, literal: false }
}
