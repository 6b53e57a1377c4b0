/**
 * The load generator's HTTP/1.1 client: keep-alive TCP connections (Bun.connect), one request at a
 * time on each (no pipelining), requests written as prepared text and answers framed by
 * Content-Length or chunked encoding. It does what `fetch` does for these runs at a fraction of its
 * CPU, which matters here: the generator shares the machine's two cores with the server and
 * Postgres, and every microsecond it spends is taken from what is being measured. `BENCH_CLIENT=fetch`
 * switches the benchmark back to `fetch` for comparison.
 */
import type { Socket } from 'bun'

export interface HttpAnswer {
  status: number
  body: string
}

interface Pending {
  bytes: Buffer
  resolve(answer: HttpAnswer): void
  reject(error: unknown): void
}

interface Connection {
  socket: Socket<Connection> | undefined
  pending: Pending | undefined
  /** Bytes of the answer read so far (headers not yet complete, or body not yet whole). */
  buffer: Buffer
  /** Request bytes the socket did not take yet. */
  unsent: Buffer | undefined
  closed: boolean
}

const HEADER_END = Buffer.from('\r\n\r\n')
const CHUNK_LINE_END = Buffer.from('\r\n')

/** An answer parsed from the front of `buffer`, and how many bytes it used; undefined while incomplete. */
export function parseAnswer(buffer: Buffer): { answer: HttpAnswer; used: number } | undefined {
  const headerEnd = buffer.indexOf(HEADER_END)
  if (headerEnd < 0) return undefined
  // The head is read as one latin1 string and scanned in place: this runs once per answer in a
  // process that shares the machine with what it measures.
  const head = buffer.toString('latin1', 0, headerEnd)
  const firstLineEnd = head.indexOf('\r\n')
  const statusLine = firstLineEnd < 0 ? head : head.slice(0, firstLineEnd)
  const status = statusLine.startsWith('HTTP/') ? Number(statusLine.slice(statusLine.indexOf(' ') + 1, statusLine.indexOf(' ') + 4)) : Number.NaN
  if (!Number.isInteger(status)) throw new Error(`not an HTTP status line: ${statusLine}`)
  let length: number | undefined
  let chunked = false
  let lineStart = firstLineEnd < 0 ? head.length : firstLineEnd + 2
  while (lineStart < head.length) {
    let lineEnd = head.indexOf('\r\n', lineStart)
    if (lineEnd < 0) lineEnd = head.length
    const colon = head.indexOf(':', lineStart)
    if (colon > lineStart && colon < lineEnd) {
      // Only two header names matter; the others are skipped without building their strings.
      const nameLength = colon - lineStart
      if (nameLength === 14 || nameLength === 17) {
        const name = head.slice(lineStart, colon).toLowerCase()
        if (name === 'content-length') length = Number(head.slice(colon + 1, lineEnd).trim())
        else if (name === 'transfer-encoding' && head.slice(colon + 1, lineEnd).toLowerCase().includes('chunked')) chunked = true
      }
    }
    lineStart = lineEnd + 2
  }
  const bodyStart = headerEnd + HEADER_END.length
  if (!chunked) {
    const size = length ?? 0
    if (buffer.length < bodyStart + size) return undefined
    return { answer: { status, body: buffer.toString('utf8', bodyStart, bodyStart + size) }, used: bodyStart + size }
  }
  const parts: Buffer[] = []
  let at = bodyStart
  for (;;) {
    const lineEnd = buffer.indexOf(CHUNK_LINE_END, at)
    if (lineEnd < 0) return undefined
    const size = Number.parseInt(buffer.toString('latin1', at, lineEnd), 16)
    if (!Number.isFinite(size)) throw new Error('bad chunk size')
    const dataStart = lineEnd + 2
    if (size === 0) {
      // Last chunk: no trailers expected, just the closing CRLF.
      if (buffer.length < dataStart + 2) return undefined
      return { answer: { status, body: Buffer.concat(parts).toString('utf8') }, used: dataStart + 2 }
    }
    if (buffer.length < dataStart + size + 2) return undefined
    parts.push(buffer.subarray(dataStart, dataStart + size))
    at = dataStart + size + 2
  }
}

/** A first-in first-out queue of idle connections that takes from the front without moving the rest. */
class IdleQueue {
  private items: Array<Connection | undefined> = []
  private head = 0

  push(connection: Connection): void {
    this.items.push(connection)
  }

  take(): Connection | undefined {
    while (this.head < this.items.length) {
      const connection = this.items[this.head]
      this.items[this.head++] = undefined
      if (this.head > 1024 && this.head * 2 > this.items.length) {
        this.items = this.items.slice(this.head)
        this.head = 0
      }
      if (connection !== undefined) return connection
    }
    return undefined
  }

  /** A connection that closed while idle is skipped when its turn comes. */
  remove(connection: Connection): void {
    const at = this.items.indexOf(connection, this.head)
    if (at >= 0) this.items[at] = undefined
  }

  clear(): void {
    this.items = []
    this.head = 0
  }
}

export class KeepAliveClient {
  /**
   * Idle connections, oldest first: each request takes the one idle longest, so a warm pool is used
   * round, and no connection sits idle long enough for the server to close it (Bun.serve closes a
   * keep-alive connection idle for 10 s).
   */
  private readonly idle = new IdleQueue()
  private readonly all = new Set<Connection>()
  private readonly hostname: string
  private readonly port: number
  private readonly host: string

  constructor(base: string) {
    const url = new URL(base)
    this.hostname = url.hostname
    this.port = Number(url.port)
    this.host = url.host
  }

  /** Sends one request on an idle connection (a new one when none is idle) and resolves with its answer. */
  request(method: string, path: string, headers: Record<string, string>, body?: string): Promise<HttpAnswer> {
    return this.send(this.prepare(method, path, headers, body))
  }

  /** A request as the bytes `send` writes: built once, sent as often as wanted (a load run repeats the same few). */
  prepare(method: string, path: string, headers: Record<string, string>, body?: string): Buffer {
    let text = `${method} ${path} HTTP/1.1\r\nhost: ${this.host}\r\n`
    for (const name in headers) text += `${name}: ${headers[name]}\r\n`
    text += body === undefined ? '\r\n' : `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
    return Buffer.from(text)
  }

  /** Sends a prepared request (see `prepare`) and resolves with its answer. */
  send(bytes: Buffer): Promise<HttpAnswer> {
    return new Promise<HttpAnswer>((resolve, reject) => {
      const pending: Pending = { bytes, resolve, reject }
      const connection = this.idle.take()
      if (connection !== undefined) this.start(connection, pending)
      else void this.open(pending)
    })
  }

  /** Connections open now. */
  get size(): number {
    return this.all.size
  }

  /**
   * Opens connections until `count` are open, `chunk` at a time, as a client with a pool of
   * persistent connections has them before it sends. A load run that instead opens a connection
   * whenever none is idle opens them in storms when answers slow down, and a storm larger than the
   * server's accept queue (512 pending connections in Bun.serve, which has no option to change it)
   * has its SYNs dropped: each dropped one costs its request a one-second retransmission.
   */
  async warm(count: number, chunk = 128): Promise<void> {
    while (this.all.size < count) {
      const opening = Math.min(chunk, count - this.all.size)
      await Promise.all(Array.from({ length: opening }, () => this.connect().then((connection) => this.idle.push(connection))))
    }
  }

  close(): void {
    for (const connection of this.all) connection.socket?.end()
    this.all.clear()
    this.idle.clear()
  }

  private async open(pending: Pending): Promise<void> {
    let connection: Connection
    try {
      connection = await this.connect()
    } catch (error) {
      pending.reject(error)
      return
    }
    this.start(connection, pending)
  }

  private async connect(): Promise<Connection> {
    const connection: Connection = { socket: undefined, pending: undefined, buffer: Buffer.alloc(0), unsent: undefined, closed: false }
    this.all.add(connection)
    try {
      connection.socket = await Bun.connect<Connection>({
        hostname: this.hostname,
        port: this.port,
        data: connection,
        socket: {
          data: (socket, chunk) => this.received(socket.data, chunk),
          drain: (socket) => this.flush(socket.data),
          close: (socket) => this.lost(socket.data, new Error('connection closed by the server')),
          error: (socket, error) => this.lost(socket.data, error),
        },
      })
      connection.socket.setNoDelay(true)
    } catch (error) {
      this.all.delete(connection)
      throw error
    }
    return connection
  }

  private start(connection: Connection, pending: Pending): void {
    connection.pending = pending
    connection.unsent = pending.bytes
    this.flush(connection)
  }

  private flush(connection: Connection): void {
    const unsent = connection.unsent
    if (unsent === undefined || connection.socket === undefined) return
    const written = connection.socket.write(unsent)
    connection.unsent = written >= unsent.length ? undefined : unsent.subarray(Math.max(written, 0))
  }

  private received(connection: Connection, chunk: Uint8Array): void {
    // A whole answer in one chunk (the usual case) is parsed where it lies: its body is copied into
    // a string, and nothing of the chunk is kept. Anything left over is kept as a copy, since the
    // runtime may reuse the chunk's memory once this callback returns.
    const view = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    connection.buffer = connection.buffer.length === 0 ? view : Buffer.concat([connection.buffer, view])
    const pending = connection.pending
    if (pending === undefined) {
      this.lost(connection, new Error('bytes arrived with no request outstanding'))
      return
    }
    let parsed: ReturnType<typeof parseAnswer>
    try {
      parsed = parseAnswer(connection.buffer)
    } catch (error) {
      this.lost(connection, error)
      return
    }
    if (parsed === undefined) {
      if (connection.buffer === view) connection.buffer = Buffer.from(view)
      return
    }
    connection.buffer = connection.buffer.subarray(parsed.used)
    connection.pending = undefined
    if (connection.buffer.length > 0) {
      // No pipelining: nothing may follow an answer.
      pending.resolve(parsed.answer)
      this.lost(connection, new Error('bytes arrived after an answer'))
      return
    }
    this.idle.push(connection)
    pending.resolve(parsed.answer)
  }

  private lost(connection: Connection, error: unknown): void {
    if (connection.closed) return
    connection.closed = true
    this.all.delete(connection)
    this.idle.remove(connection)
    connection.socket?.end()
    const pending = connection.pending
    connection.pending = undefined
    pending?.reject(error)
  }
}
