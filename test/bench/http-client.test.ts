import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { KeepAliveClient, parseAnswer } from '../../bench/http-client.ts'

describe('benchmark HTTP client: answer framing', () => {
  test('an answer framed by Content-Length is whole only once every body byte arrived', () => {
    const text = 'HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nContent-Length: 13\r\n\r\n{"state":"a"}'
    expect(parseAnswer(Buffer.from(text.slice(0, 40)))).toBeUndefined()
    expect(parseAnswer(Buffer.from(text.slice(0, -1)))).toBeUndefined()
    expect(parseAnswer(Buffer.from(text))).toEqual({ answer: { status: 201, body: '{"state":"a"}' }, used: Buffer.byteLength(text) })
  })

  test('a chunked answer is joined from its chunks, multi-byte characters included', () => {
    const body = '{"name":"café"}'
    const bytes = Buffer.from(body)
    const text = Buffer.concat([
      Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n'),
      Buffer.from(`${(5).toString(16)}\r\n`),
      bytes.subarray(0, 5),
      Buffer.from(`\r\n${(bytes.length - 5).toString(16)}\r\n`),
      bytes.subarray(5),
      Buffer.from('\r\n0\r\n\r\n'),
    ])
    expect(parseAnswer(text.subarray(0, text.length - 2))).toBeUndefined()
    expect(parseAnswer(text)).toEqual({ answer: { status: 200, body }, used: text.length })
  })

  test('an answer without a body (204) is whole at the end of its headers', () => {
    expect(parseAnswer(Buffer.from('HTTP/1.1 204 No Content\r\n\r\n'))).toEqual({ answer: { status: 204, body: '' }, used: 27 })
  })

  test('bytes that are not HTTP are refused', () => {
    expect(() => parseAnswer(Buffer.from('SSH-2.0-OpenSSH\r\n\r\n'))).toThrow('not an HTTP status line')
  })
})

describe('benchmark HTTP client against a real server', () => {
  let server: ReturnType<typeof Bun.serve>
  beforeAll(() => {
    server = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      async fetch(request, self) {
        const url = new URL(request.url)
        if (url.pathname === '/port') return new Response(String(self.requestIP(request)?.port))
        if (url.pathname === '/echo') return Response.json({ method: request.method, auth: request.headers.get('authorization'), body: await request.text() }, { status: 201 })
        if (url.pathname === '/stream') return new Response(new ReadableStream({ start(controller) { controller.enqueue(new TextEncoder().encode('part one, ')); controller.enqueue(new TextEncoder().encode('part two')); controller.close() } }))
        if (url.pathname === '/big') return new Response('x'.repeat(200_000))
        return new Response('missing', { status: 404 })
      },
    })
  })
  afterAll(() => server.stop(true))

  test('requests reuse keep-alive connections and answers keep their status and body', async () => {
    const client = new KeepAliveClient(`http://127.0.0.1:${server.port}`)
    try {
      for (let round = 0; round < 3; round++) {
        const answer = await client.request('POST', '/echo', { authorization: 'Bearer k', 'content-type': 'application/json' }, '{"amount":"1.00","note":"é"}')
        expect(answer.status).toBe(201)
        expect(JSON.parse(answer.body)).toEqual({ method: 'POST', auth: 'Bearer k', body: '{"amount":"1.00","note":"é"}' })
      }
      expect(client.size).toBe(1)
      const answers = await Promise.all(Array.from({ length: 20 }, () => client.request('GET', '/big', {})))
      expect(answers.every((answer) => answer.status === 200 && answer.body.length === 200_000)).toBe(true)
      expect(client.size).toBeLessThanOrEqual(20)
      expect(await client.request('GET', '/stream', {})).toEqual({ status: 200, body: 'part one, part two' })
      expect((await client.request('GET', '/nowhere', {})).status).toBe(404)
    } finally {
      client.close()
    }
  })

  test('a warmed pool holds its connections, and each request takes the one idle longest', async () => {
    const client = new KeepAliveClient(`http://127.0.0.1:${server.port}`)
    try {
      await client.warm(5, 2)
      expect(client.size).toBe(5)
      const ports: string[] = []
      for (let round = 0; round < 10; round++) ports.push((await client.request('GET', '/port', {})).body)
      expect(client.size).toBe(5)
      // Round the pool: five distinct connections, then the same five in the same order.
      expect(new Set(ports).size).toBe(5)
      expect(ports.slice(5)).toEqual(ports.slice(0, 5))
    } finally {
      client.close()
    }
  })

  test('a request to a port nobody listens on is rejected, not left hanging', async () => {
    const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('') })
    const port = probe.port
    probe.stop(true)
    const client = new KeepAliveClient(`http://127.0.0.1:${port}`)
    await expect(client.request('GET', '/', {})).rejects.toThrow()
    client.close()
  })
})
