import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { hostname } from 'node:os'
import { checkWebhookUrl, systemResolve, UrlRefused, type UrlPolicy } from '../../server/lib/url-policy.ts'
import { sendWebhook } from '../../server/modules/webhooks/sender.ts'
import { makeCertificate, startReceiver, type Certificate, type Receiver } from './receivers.ts'

const PRODUCTION: UrlPolicy = { allowLoopback: false }

/**
 * Every row goes through the real WHATWG URL parser and the real policy; names resolve through the
 * system resolver unless the row says which addresses its name has (a DNS answer we choose).
 */
const REFUSED: Array<[string, string, string[]?]> = [
  ['plain http', 'http://hooks.example.com/'],
  ['another scheme', 'ftp://hooks.example.com/'],
  ['no scheme', 'hooks.example.com/in'],
  ['credentials in the URL', 'https://user:pass@hooks.example.com/'],
  ['a user name alone', 'https://user@hooks.example.com/'],
  ['localhost', 'https://localhost/hook'],
  ['localhost with a trailing dot', 'https://localhost./hook'],
  ['localhost with two trailing dots', 'https://localhost../hook'],
  ['LOCALHOST in capitals', 'https://LOCALHOST:8443/hook'],
  ['a subdomain of localhost', 'https://api.localhost/hook'],
  ['loopback', 'https://127.0.0.1/'],
  ['loopback elsewhere in 127/8', 'https://127.45.6.7/'],
  ['loopback as a decimal number', 'https://2130706433/'],
  ['loopback in octal', 'https://0177.0.0.1/'],
  ['loopback in hex', 'https://0x7f.1/'],
  ['loopback in short form', 'https://127.1/'],
  ['loopback percent-encoded', 'https://%31%32%37.0.0.1/'],
  ['loopback with a trailing dot', 'https://127.0.0.1./'],
  ['IPv6 loopback', 'https://[::1]/'],
  ['IPv4-mapped IPv6 loopback, dotted', 'https://[::ffff:127.0.0.1]/'],
  ['IPv4-mapped IPv6 loopback, hex', 'https://[::ffff:7f00:1]/'],
  ['IPv4-mapped IPv6 private', 'https://[::ffff:10.1.2.3]/'],
  ['RFC 1918 10/8', 'https://10.0.0.1/'],
  ['RFC 1918 172.16/12', 'https://172.16.5.4/'],
  ['RFC 1918 172.31 edge', 'https://172.31.255.255/'],
  ['RFC 1918 192.168/16', 'https://192.168.1.1/'],
  ['RFC 1918 in decimal', 'https://3232235777/'],
  ['CGNAT 100.64/10', 'https://100.64.0.1/'],
  ['CGNAT upper edge', 'https://100.127.255.254/'],
  ['link-local', 'https://169.254.10.20/'],
  ['cloud metadata (AWS, GCP, Azure)', 'https://169.254.169.254/latest/meta-data/'],
  ['cloud metadata in hex', 'https://0xa9fea9fe/'],
  ['AWS IPv6 metadata', 'https://[fd00:ec2::254]/'],
  ['GCP metadata name', 'https://metadata.google.internal/computeMetadata/v1/'],
  ['GCP metadata name with a trailing dot', 'https://metadata.google.internal./'],
  ['IPv6 unique-local', 'https://[fc00::1]/'],
  ['IPv6 unique-local fd', 'https://[fd12:3456:789a::1]/'],
  ['IPv6 link-local', 'https://[fe80::1]/'],
  ['unspecified IPv4', 'https://0.0.0.0/'],
  ['zero in short form', 'https://0/'],
  ['unspecified IPv6', 'https://[::]/'],
  ['broadcast', 'https://255.255.255.255/'],
  ['multicast', 'https://224.0.0.1/'],
  ['IPv6 multicast', 'https://[ff02::1]/'],
  ['reserved 240/4', 'https://240.0.0.1/'],
  ['documentation range', 'https://192.0.2.10/'],
  ['NAT64 of a private address', 'https://[64:ff9b::a00:1]/'],
  ['NAT64 of loopback, dotted', 'https://[64:ff9b::127.0.0.1]/'],
  ['6to4 of loopback', 'https://[2002:7f00:1::1]/'],
  ['6to4 of cloud metadata', 'https://[2002:a9fe:a9fe::1]/'],
  ['IPv4-compatible IPv6 loopback, dotted', 'https://[::127.0.0.1]/hook'],
  ['IPv4-compatible IPv6 loopback, hex', 'https://[::7f00:1]/hook'],
  ['IPv4-compatible IPv6 cloud metadata', 'https://[::169.254.169.254]/hook'],
  ['IPv4-compatible IPv6 private', 'https://[::10.0.0.1]/hook'],
  ['IPv4-compatible IPv6 CGNAT', 'https://[::100.64.0.1]/hook'],
  ['IPv4-translated IPv6 loopback', 'https://[::ffff:0:127.0.0.1]/hook'],
  ['NAT64 of cloud metadata', 'https://[64:ff9b::169.254.169.254]/'],
  ['local-use NAT64', 'https://[64:ff9b:1::a00:1]/'],
  ['Teredo with a private client (stored inverted)', 'https://[2001:0:5ef5:79fb:0:0:f5ff:fffe]/'],
  ['Teredo with a loopback server', 'https://[2001:0:7f00:1::1]/'],
  ['an .internal name', 'https://payments.internal/hook'],
  ['a .local name', 'https://printer.local/hook'],
  ['a name that resolves to loopback', 'https://rebind.example.net/', ['127.0.0.1']],
  ['a name that resolves to metadata', 'https://meta.example.net/', ['169.254.169.254']],
  ['a name with one private address among public ones', 'https://mixed.example.net/', ['93.184.216.34', '10.0.0.5']],
  ['a name that resolves to IPv4-mapped loopback', 'https://mapped.example.net/', ['::ffff:127.0.0.1']],
  ['a name that resolves to unique-local IPv6', 'https://ula.example.net/', ['fd00::1']],
]

const ACCEPTED: Array<[string, string, string[]?]> = [
  ['a public name', 'https://hooks.example.com/kassa', ['93.184.216.34']],
  ['a public name with a port and query', 'https://hooks.example.com:8443/in?source=kassa', ['93.184.216.34']],
  ['a public IPv4 address', 'https://93.184.216.34/hook'],
  ['a public IPv6 address', 'https://[2606:4700:4700::1111]/hook'],
  ['a public address as a decimal number (it is public)', 'https://1572395042/'],
  ['a public name with IPv4 and IPv6 answers', 'https://dual.example.com/', ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946']],
  ['NAT64 of a public address', 'https://[64:ff9b::808:808]/'],
  ['IPv4-mapped IPv6 of a public address', 'https://[::ffff:8.8.8.8]/'],
  ['6to4 of a public address', 'https://[2002:808:808::1]/'],
  ['Teredo with a public server and client', 'https://[2001:0:5ef5:79fb:0:0:f7f7:f7f7]/'],
  ['a public name with a trailing dot', 'https://hooks.example.com./in', ['93.184.216.34']],
  ['172.32 (just outside RFC 1918)', 'https://172.32.0.1/'],
  ['100.128 (just outside CGNAT)', 'https://100.128.0.1/'],
]

function policyFor(addresses: string[] | undefined): UrlPolicy {
  return addresses === undefined ? PRODUCTION : { ...PRODUCTION, resolve: async () => addresses }
}

describe('webhook URL policy', () => {
  test(`refuses at least 30 forms (${REFUSED.length} here)`, () => {
    expect(REFUSED.length).toBeGreaterThanOrEqual(30)
  })

  test.each(REFUSED)('refuses %s: %s', async (_name, url, addresses) => {
    await expect(checkWebhookUrl(url, policyFor(addresses))).rejects.toBeInstanceOf(UrlRefused)
  })

  test.each(ACCEPTED)('accepts %s: %s', async (_name, url, addresses) => {
    const checked = await checkWebhookUrl(url, policyFor(addresses))
    expect(checked.url.protocol).toBe('https:')
  })

  test('refuses a name that the system resolver maps to loopback (this machine\'s own name)', async () => {
    const name = hostname()
    const addresses = await systemResolve(name).catch(() => [] as string[])
    // The machine's own name is in /etc/hosts on this system; where it is not, the row proves nothing.
    expect(addresses.length).toBeGreaterThan(0)
    await expect(checkWebhookUrl(`https://${name}/hook`, PRODUCTION)).rejects.toThrow(/resolves to a refused address/)
  })

  test('accepts loopback only with the test-only setting, and nothing else local with it', async () => {
    const loopbackAllowed: UrlPolicy = { allowLoopback: true }
    await expect(checkWebhookUrl('https://127.0.0.1:8443/hook', loopbackAllowed)).resolves.toBeDefined()
    await expect(checkWebhookUrl('https://localhost:8443/hook', loopbackAllowed)).resolves.toBeDefined()
    for (const url of ['https://10.0.0.1/', 'https://169.254.169.254/', 'https://[fd00:ec2::254]/', 'https://metadata.google.internal/', 'http://127.0.0.1/']) {
      await expect(checkWebhookUrl(url, loopbackAllowed)).rejects.toBeInstanceOf(UrlRefused)
    }
  })
})

describe('the check at delivery', () => {
  let certificate: Certificate
  let target: Receiver
  beforeAll(() => {
    certificate = makeCertificate()
    target = startReceiver(certificate)
  })
  afterAll(() => {
    target.stop()
    certificate.remove()
  })

  const send = (url: string, policy: UrlPolicy) =>
    sendWebhook(url, JSON.stringify({ id: 'evt_x', type: 'account.created', created: new Date().toISOString(), data: {} }), {
      policy,
      timeoutMs: 5000,
      ca: certificate.cert,
      signal: new AbortController().signal,
      headers: { 'content-type': 'application/json' },
    })

  test('connects to the address it checked, with the name kept for TLS and Host (a pinned connection)', async () => {
    const port = new URL(target.url).port
    // The name does not exist in any DNS; the resolver's answer is the only way to reach the receiver.
    const result = await send(`https://localhost:${port}/hook`, { allowLoopback: true, resolve: async () => ['127.0.0.1'] })
    expect(result).toEqual({ kind: 'answered', statusCode: 200 })
    expect(target.received.at(-1)!.headers.get('host')).toBe(`localhost:${port}`)
  })

  test('refuses to send when the name now resolves to a refused address (DNS rebinding), without connecting', async () => {
    const port = new URL(target.url).port
    let answers = 0
    // First answer public (registration passes), later answers loopback (the rebinding).
    const rebinding: UrlPolicy = { allowLoopback: false, resolve: async () => (answers++ === 0 ? ['93.184.216.34'] : ['127.0.0.1']) }
    await expect(checkWebhookUrl(`https://rebind.example.net:${port}/hook`, rebinding)).resolves.toBeDefined()
    const before = target.received.length
    const result = await send(`https://rebind.example.net:${port}/hook`, rebinding)
    expect(result.kind).toBe('refused_address')
    expect(target.received.length).toBe(before)
  })

  test('refuses to send to an IPv4-compatible IPv6 literal of a refused address, judged by the address it carries, without connecting', async () => {
    const before = target.received.length
    for (const host of ['[::127.0.0.1]', '[::169.254.169.254]', '[::10.0.0.1]', '[2002:7f00:1::1]']) {
      const result = await send(`https://${host}:${new URL(target.url).port}/hook`, { allowLoopback: false })
      expect(result.kind).toBe('refused_address')
    }
    expect(target.received.length).toBe(before)
  })

  test('refuses to send when the name does not resolve at all', async () => {
    const result = await send('https://nothing.invalid/hook', { allowLoopback: false, resolve: async () => [] })
    expect(result.kind).toBe('refused_address')
  })
})
