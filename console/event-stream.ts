import type { KassaEvent } from './api.ts'

export type StreamState = 'connecting' | 'live' | 'paused' | 'reconnecting' | 'refused'

export interface StreamOptions {
  baseUrl: string
  headers: Record<string, string>
  /** Comma-separated exact types and `ns.*` namespaces; empty for all. */
  types: string
  orgId: string
  /** Where to resume: the last event id received, undefined to start at the end of the log. */
  lastEventId: string | undefined
  /** Events shown from before the start when there is no cursor. */
  backlog: number
  onEvents(events: KassaEvent[]): void
  onState(state: StreamState, detail?: string): void
  /**
   * True while the receiver has more than it can take: reading stops until it is false again, so
   * the server holds the cursor instead of this process holding the events.
   */
  isFull?(): boolean
}

const FULL_WAIT_MS = 20

const RECONNECT_DELAY_MIN_MS = 250
const RECONNECT_DELAY_MAX_MS = 5000

/** Splits SSE text into complete messages; the unfinished tail is kept for the next chunk. */
export function parseSse(buffer: string): { messages: Array<{ id?: string; data: string }>; rest: string } {
  const messages: Array<{ id?: string; data: string }> = []
  let rest = buffer
  for (;;) {
    const end = rest.indexOf('\n\n')
    if (end < 0) break
    const block = rest.slice(0, end)
    rest = rest.slice(end + 2)
    let id: string | undefined
    const data: string[] = []
    for (const line of block.split('\n')) {
      if (line.startsWith('id: ')) id = line.slice(4)
      else if (line.startsWith('data: ')) data.push(line.slice(6))
    }
    if (data.length > 0) messages.push({ id, data: data.join('\n') })
  }
  return { messages, rest }
}

/**
 * Follows `/ops/v1/events/stream` until stopped. A dropped connection is retried with a growing delay
 * and Last-Event-ID set to the last event received, so the server sends exactly what followed: none
 * lost, none twice. Only a refusal (bad token, bad filter) stops it. Answers a function that stops it
 * and resolves with the last event id received.
 */
export function followEvents(options: StreamOptions): { stop(): string | undefined; lastEventId(): string | undefined } {
  let lastEventId = options.lastEventId
  let stopped = false
  let controller: AbortController | undefined

  async function once(): Promise<'retry' | 'refused'> {
    controller = new AbortController()
    const query = new URLSearchParams()
    if (options.types !== '') query.set('types', options.types)
    if (options.orgId !== '') query.set('orgId', options.orgId)
    if (lastEventId === undefined && options.backlog > 0) query.set('backlog', String(options.backlog))
    const headers: Record<string, string> = { ...options.headers, accept: 'text/event-stream' }
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId
    const response = await fetch(`${options.baseUrl}/ops/v1/events/stream?${query}`, { headers, signal: controller.signal })
    if (!response.ok || response.body === null) {
      const body = (await response.json().catch(() => undefined)) as { error?: { message?: string } } | undefined
      options.onState('refused', body?.error?.message ?? `HTTP ${response.status}`)
      return response.status >= 500 ? 'retry' : 'refused'
    }
    options.onState('live')
    const decoder = new TextDecoder()
    let buffer = ''
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true })
      const parsed = parseSse(buffer)
      buffer = parsed.rest
      const events: KassaEvent[] = []
      for (const message of parsed.messages) {
        const event = JSON.parse(message.data) as KassaEvent
        events.push(event)
        lastEventId = message.id ?? event.id
      }
      if (events.length > 0 && !stopped) options.onEvents(events)
      while (!stopped && options.isFull?.()) await Bun.sleep(FULL_WAIT_MS)
    }
    return 'retry'
  }

  void (async () => {
    let delayMs = RECONNECT_DELAY_MIN_MS
    options.onState('connecting')
    while (!stopped) {
      let outcome: 'retry' | 'refused' = 'retry'
      const startedMs = Date.now()
      try {
        outcome = await once()
      } catch (error) {
        if (stopped) return
        options.onState('reconnecting', (error as Error).message)
      }
      if (stopped || outcome === 'refused') return
      if (Date.now() - startedMs > RECONNECT_DELAY_MAX_MS) delayMs = RECONNECT_DELAY_MIN_MS
      options.onState('reconnecting', 'connection closed')
      await Bun.sleep(delayMs)
      delayMs = Math.min(delayMs * 2, RECONNECT_DELAY_MAX_MS)
    }
  })()

  return {
    stop() {
      stopped = true
      controller?.abort()
      return lastEventId
    },
    lastEventId: () => lastEventId,
  }
}
