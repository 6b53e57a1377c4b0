import { createConnection, createServer, type Server, type Socket } from 'node:net'

/**
 * - `forwarding`: bytes flow both ways.
 * - `stalled`: connections stay open and new ones are accepted, but no byte moves in either
 *   direction (a black-holed network: the peer neither answers nor hangs up).
 * - `closed`: every connection is destroyed and new ones are refused (nothing listens on the port).
 */
export type ProxyMode = 'forwarding' | 'stalled' | 'closed'

interface Pair {
  client: Socket
  upstream: Socket
}

/**
 * A real TCP proxy on 127.0.0.1 between a client (the server under test) and an upstream (Postgres)
 * whose connectivity the test switches. It keeps its port across `closed` and back.
 */
export class TcpProxy {
  private server: Server | undefined
  private readonly pairs = new Set<Pair>()
  private currentMode: ProxyMode = 'forwarding'
  port = 0
  /** Connections accepted over the proxy's life. */
  accepted = 0

  private constructor(
    private readonly upstreamHost: string,
    private readonly upstreamPort: number,
  ) {}

  static async start(upstreamHost: string, upstreamPort: number): Promise<TcpProxy> {
    const proxy = new TcpProxy(upstreamHost, upstreamPort)
    await proxy.listen(0)
    return proxy
  }

  get mode(): ProxyMode {
    return this.currentMode
  }

  /** `url` with its host and port replaced by the proxy's. */
  rewrite(url: string): string {
    const parsed = new URL(url)
    parsed.hostname = '127.0.0.1'
    parsed.port = String(this.port)
    return parsed.toString()
  }

  async setMode(mode: ProxyMode): Promise<void> {
    if (mode === this.currentMode) return
    const previous = this.currentMode
    this.currentMode = mode
    if (mode === 'stalled') {
      for (const pair of this.pairs) this.pause(pair)
    } else if (mode === 'closed') {
      for (const pair of this.pairs) this.destroy(pair)
      await this.unlisten()
    } else {
      if (previous === 'closed') await this.listen(this.port)
      for (const pair of this.pairs) this.resume(pair)
    }
  }

  async close(): Promise<void> {
    this.currentMode = 'closed'
    for (const pair of this.pairs) this.destroy(pair)
    await this.unlisten()
  }

  private listen(port: number): Promise<void> {
    const server = createServer({ pauseOnConnect: true }, (client) => this.accept(client))
    this.server = server
    return new Promise((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject)
        const address = server.address()
        if (address && typeof address === 'object') this.port = address.port
        resolve()
      })
    })
  }

  private unlisten(): Promise<void> {
    const server = this.server
    this.server = undefined
    if (!server) return Promise.resolve()
    return new Promise((resolve) => server.close(() => resolve()))
  }

  private accept(client: Socket): void {
    if (this.currentMode === 'closed') {
      client.destroy()
      return
    }
    this.accepted += 1
    const upstream = createConnection({ host: this.upstreamHost, port: this.upstreamPort })
    upstream.pause()
    const pair: Pair = { client, upstream }
    this.pairs.add(pair)
    const forward = (from: Socket, to: Socket) => {
      from.on('data', (chunk) => {
        if (!to.write(chunk)) {
          from.pause()
          to.once('drain', () => {
            if (this.currentMode === 'forwarding') from.resume()
          })
        }
      })
    }
    forward(client, upstream)
    forward(upstream, client)
    const end = () => this.destroy(pair)
    for (const socket of [client, upstream]) {
      socket.on('error', end)
      socket.on('close', end)
    }
    if (this.currentMode === 'forwarding') this.resume(pair)
  }

  private pause(pair: Pair): void {
    pair.client.pause()
    pair.upstream.pause()
  }

  private resume(pair: Pair): void {
    pair.client.resume()
    pair.upstream.resume()
  }

  private destroy(pair: Pair): void {
    if (!this.pairs.delete(pair)) return
    pair.client.destroy()
    pair.upstream.destroy()
  }
}
