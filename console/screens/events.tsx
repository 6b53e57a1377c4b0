import { Box, Static, Text, useInput } from 'ink'
import { useEffect, useLayoutEffect, useRef, useState } from 'react'
import type { KassaEvent } from '../api.ts'
import { Outcome, Prompt, shortId } from '../components.tsx'
import { useConsole, useTint } from '../context.tsx'
import { followEvents, type StreamState } from '../event-stream.ts'
import { TailQueue } from '../tail-queue.ts'
import type { ScreenDefinition, ScreenProps } from './types.ts'

/** Events shown from before the start of a tail (and after a filter change). */
const BACKLOG = 10
/**
 * Arrivals are handed to the view at most this often: at a thousand events a second a render per
 * network chunk would spend the console's time laying out frames instead of writing lines.
 */
const FLUSH_MS = 100
/**
 * Lines waiting for the view beyond this stop the reading of the stream until the view catches up:
 * the server holds the cursor instead of this process holding the events.
 */
const WAITING_MAX = 2000
/**
 * Lines written in one frame at most. Ink lays a batch out cell by cell, so a frame's work and the
 * garbage it leaves grow with its lines; ten frames a second of this many keep well ahead of a
 * thousand events a second.
 */
const BATCH_MAX = 500

/** What the tail keeps while the operator is on another tab: where it stopped and its filters. */
interface TailMemory {
  cursor?: string
  types?: string
  orgId?: string
  paused?: boolean
  received?: number
}

/**
 * The lines handed to <Static> in one go, as one text: one node to lay out rather than one per
 * event. <Static> writes its items once and keeps only the index it reached, so each batch is a new
 * <Static> (a new key) and the view holds one batch at most.
 */
interface Batch {
  generation: number
  text: string
}

function summary(type: string, data: Record<string, unknown>): string {
  if (type === 'operator.action') return `${data.operator} ${data.action} ${shortId(String(data.targetId), 16)} ${data.outcome}`
  const parts: string[] = []
  for (const name of ['id', 'state', 'amount', 'asset']) {
    const value = data[name]
    if (typeof value === 'string' || typeof value === 'number') parts.push(name === 'id' ? String(value) : `${name}=${value}`)
  }
  return parts.join(' ')
}

/** The tail's filters as one string: a stream of another filter is another tail. */
function filterOf(types: string, orgId: string): string {
  return `${types}\n${orgId}`
}

export function eventLine(event: KassaEvent): string {
  const time = event.created.slice(11, 19)
  return `${time} ${shortId(event.orgId ?? 'platform', 12).padEnd(12)} ${event.type} ${summary(event.type, event.data)}`
}

function EventsScreen({ width, active, setCapturing, memory }: ScreenProps) {
  const { api, report } = useConsole()
  const tint = useTint()
  const saved = memory as TailMemory
  const [types, setTypes] = useState(saved.types ?? '')
  const [orgId, setOrgId] = useState(saved.orgId ?? '')
  const [paused, setPaused] = useState(saved.paused ?? false)
  const [state, setState] = useState<{ state: StreamState; detail?: string }>({ state: 'connecting' })
  const [received, setReceived] = useState(saved.received ?? 0)
  const [waiting, setWaiting] = useState(0)
  const [editing, setEditing] = useState<'types' | 'orgId' | null>(null)
  const [batch, setBatch] = useState<Batch>({ generation: 0, text: '' })
  const queueRef = useRef<TailQueue | null>(null)
  queueRef.current ??= new TailQueue(WAITING_MAX, BATCH_MAX, { filter: filterOf(saved.types ?? '', saved.orgId ?? ''), cursor: saved.cursor })
  const queue = queueRef.current
  // Read by the flush timer: under the help the screen is hidden and <Static> writes nothing, so
  // lines wait (and the stream stops when they fill the queue) until the help is closed.
  const shown = useRef(active)
  shown.current = active

  useEffect(() => {
    const timer = setInterval(() => {
      const next = shown.current ? queue.take() : undefined
      // How far the terminal is behind the stream, on the status line (React skips an unchanged value).
      setWaiting(queue.size)
      if (next === undefined) return
      setReceived((count) => {
        saved.received = count + next.lines.length
        return count + next.lines.length
      })
      setBatch({ generation: next.generation, text: next.lines.map((line) => line.slice(0, width)).join('\n') })
    }, FLUSH_MS)
    return () => clearInterval(timer)
  }, [queue, saved, width])

  // Layout effects run after Ink wrote the commit's <Static> output: the batch is on the terminal.
  useLayoutEffect(() => {
    queue.written(batch.generation)
    saved.cursor = queue.cursor
  }, [queue, saved, batch.generation])

  setCapturing(editing !== null)

  useEffect(() => {
    if (paused) {
      setState({ state: 'paused' })
      return
    }
    saved.cursor = queue.follow(filterOf(types, orgId))
    const stream = followEvents({
      baseUrl: api.baseUrl,
      headers: api.headers(),
      types,
      orgId,
      lastEventId: saved.cursor,
      backlog: BACKLOG,
      onEvents(events) {
        queue.push(events.map((event) => ({ id: event.id, line: eventLine(event) })))
      },
      isFull: () => queue.isFull(),
      onState(next, detail) {
        setState({ state: next, detail })
        if (next === 'live') report({ ok: true })
        else if (next === 'refused') report({ ok: false, code: 'refused', message: `event stream: ${detail ?? 'refused'}` })
        else if (next === 'reconnecting') report({ ok: false, code: 'unreachable', message: `event stream: ${detail ?? 'reconnecting'}` })
      },
    })
    return () => {
      stream.stop()
      queue.stopped()
    }
  }, [paused, types, orgId, api, report, saved, queue])

  // A new filter is a new tail (see TailQueue.follow): it starts at the end of the log, with a
  // short backlog, and what the old one received but did not show yet is dropped.
  const changeFilter = (which: 'types' | 'orgId', value: string) => {
    if (which === 'types') {
      saved.types = value
      setTypes(value)
    } else {
      saved.orgId = value
      setOrgId(value)
    }
    setEditing(null)
  }

  // Always subscribed; it reads the state it needs (see the Withdrawals screen).
  useInput((input) => {
    if (!active || editing !== null) return
    if (input === 'p') {
      saved.paused = !paused
      setPaused(!paused)
    } else if (input === 't') setEditing('types')
    else if (input === 'o') setEditing('orgId')
    else if (input === 'c') {
      saved.types = ''
      saved.orgId = ''
      setTypes('')
      setOrgId('')
    }
  })

  const stateColor = state.state === 'live' ? 'green' : state.state === 'paused' ? 'yellow' : 'red'
  return (
    <Box flexDirection="column">
      <Static key={batch.generation} items={batch.text === '' ? [] : [batch.text]}>
        {(text, index) => <Text key={index}>{text}</Text>}
      </Static>
      <Text wrap="truncate">
        <Text bold>Tail</Text> types <Text color={tint('cyan')}>{types === '' ? 'all' : types}</Text> · org{' '}
        <Text color={tint('cyan')}>{orgId === '' ? 'all' : orgId}</Text> · <Text color={tint(stateColor)}>{state.state}</Text>
        {state.detail && state.state !== 'live' ? ` (${state.detail})` : ''} · {received} received
        {waiting > 0 ? ` · ${waiting} waiting` : ''}
      </Text>
      {paused ? <Outcome message={{ text: `Paused${queue.cursor ? ` after ${queue.cursor}` : ''}: events keep arriving and follow on resume`, tone: 'info' }} /> : null}
      {editing === 'types' ? (
        <Prompt label="Types (exact or ns.*, comma-separated, empty for all):" defaultValue={types} onCancel={() => setEditing(null)} onSubmit={(value) => changeFilter('types', value)} />
      ) : null}
      {editing === 'orgId' ? <Prompt label="Organization id (empty for all):" defaultValue={orgId} onCancel={() => setEditing(null)} onSubmit={(value) => changeFilter('orgId', value)} /> : null}
    </Box>
  )
}

export const eventsScreen: ScreenDefinition = {
  id: 'events',
  title: 'Events',
  keys: [
    ['p', 'pause'],
    ['t', 'types'],
    ['o', 'organization'],
    ['c', 'clear'],
  ],
  help: 'A live tail of the event log across organizations, newest at the bottom. Filter by types (exact, or a namespace as treasury.*) and by organization. Pause stops reading: events keep arriving in the log and follow from where the tail stopped on resume; a dropped connection resumes the same way, none lost or repeated.',
  Component: EventsScreen,
}

