import { invalid } from '../../lib/errors.ts'
import type { OperatorContext } from './service.ts'
import { EVENT_TYPE_FILTER_MAX, EVENT_TYPE_PATTERN } from '../events/model.ts'
import type { StreamInput } from './model.ts'
import * as repo from './repo.ts'

/** How often a quiet stream looks for new events: an event reaches the tail within this of its commit. */
export const STREAM_POLL_MS = 200
/** Events read at once; a stream behind the log catches up this many per read, without waiting. */
const STREAM_BATCH_MAX = 1000
/** A comment line on a quiet stream, well within the server's 10 s idle timeout. */
const KEEP_ALIVE_MS = 5000
const BACKLOG_MAX = 200
const NAMESPACE_PATTERN = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/

export function parseStreamFilter(input: StreamInput): repo.StreamFilter {
  const filter: repo.StreamFilter = { types: [], namespaces: [], orgId: input.orgId }
  if (input.types === undefined || input.types.trim() === '') return filter
  const entries = [...new Set(input.types.split(',').map((entry) => entry.trim()))]
  if (entries.length > EVENT_TYPE_FILTER_MAX) throw invalid('types', `types holds at most ${EVENT_TYPE_FILTER_MAX} entries`)
  for (const entry of entries) {
    if (entry.endsWith('.*') && NAMESPACE_PATTERN.test(entry.slice(0, -2))) filter.namespaces.push(entry.slice(0, -2))
    else if (EVENT_TYPE_PATTERN.test(entry) && entry.length <= 100) filter.types.push(entry)
    else throw invalid('types', `"${entry.slice(0, 100)}" is neither an event type nor a namespace with .* (treasury.*)`)
  }
  return filter
}

function frame(event: repo.StreamEventRecord): string {
  const body = JSON.stringify({ id: event.id, orgId: event.orgId, type: event.type, created: event.createdAt.toISOString(), data: event.data })
  return `id: ${event.id}\ndata: ${body}\n\n`
}

/**
 * Resolves where a stream starts: after the event named by Last-Event-ID (or `after`), or at the end
 * of the log with up to `backlog` matching events before it. Refused before any byte is sent.
 */
async function startingPoint(context: Pick<OperatorContext, 'db'>, input: StreamInput, lastEventId: string | undefined, filter: repo.StreamFilter) {
  const cursorId = lastEventId ?? input.after
  if (cursorId !== undefined && cursorId !== '') {
    const position = await repo.positionOf(context.db, cursorId)
    if (!position) throw invalid(lastEventId !== undefined ? 'Last-Event-ID' : 'after', 'The cursor must be the id of an event in the log')
    return { position, backlog: [] as repo.StreamEventRecord[] }
  }
  const backlogSize = input.backlog ?? 0
  if (!Number.isSafeInteger(backlogSize) || backlogSize < 0 || backlogSize > BACKLOG_MAX) throw invalid('backlog', `backlog must be a whole number from 0 to ${BACKLOG_MAX}`)
  const position = await repo.endOfLog(context.db)
  const backlog = backlogSize === 0 ? [] : await repo.eventsUntil(context.db, position, filter, backlogSize)
  return { position, backlog }
}

/**
 * The event log as Server-Sent Events, across organizations. The stream is pulled: it reads the
 * next batch only when the client has taken the last one, so a slow client holds the server's
 * cursor back instead of its memory growing. Events come in log order (see the events module), each
 * with its id as the SSE id, so a client that reconnects with Last-Event-ID gets exactly what follows.
 */
export async function eventStream(context: Pick<OperatorContext, 'db'>, input: StreamInput, lastEventId: string | undefined, signal: AbortSignal): Promise<Response> {
  const filter = parseStreamFilter(input)
  const start = await startingPoint(context, input, lastEventId, filter)
  let position = start.position
  let closed = false
  let quietSinceMs = Date.now()
  const encoder = new TextEncoder()
  const stop = () => {
    closed = true
  }
  signal.addEventListener('abort', stop)
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      let opening = 'retry: 1000\n: connected\n\n'
      for (const event of start.backlog) opening += frame(event)
      controller.enqueue(encoder.encode(opening))
    },
    async pull(controller) {
      while (!closed) {
        let events: repo.StreamEventRecord[]
        try {
          events = await repo.eventsAfter(context.db, position, filter, STREAM_BATCH_MAX)
        } catch (error) {
          // The client reconnects from its last id; the error is the server's to log.
          console.error('operator event stream: reading the log failed; closing the stream', error)
          closed = true
          controller.close()
          return
        }
        if (events.length > 0) {
          position = events[events.length - 1]!
          quietSinceMs = Date.now()
          controller.enqueue(encoder.encode(events.map(frame).join('')))
          return
        }
        if (Date.now() - quietSinceMs >= KEEP_ALIVE_MS) {
          quietSinceMs = Date.now()
          controller.enqueue(encoder.encode(': keep-alive\n\n'))
          return
        }
        await Bun.sleep(STREAM_POLL_MS)
      }
      // The client went away: the stream is already cancelled and there is nothing left to close.
      signal.removeEventListener('abort', stop)
    },
    cancel: stop,
  })
  return new Response(body, {
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' },
  })
}
