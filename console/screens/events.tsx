import { Box, Static, Text, useInput } from 'ink'
import { useEffect, useLayoutEffect, useRef, useState } from 'react'
import type { KassaEvent } from '../api.ts'
import { Outcome, Prompt, shortId } from '../components.tsx'
import { useConsole, useTint } from '../context.tsx'
import { followEvents, type StreamState } from '../event-stream.ts'
import type { ScreenDefinition, ScreenProps } from './types.ts'

/** Events shown from before the start of a tail (and after a filter change). */
const BACKLOG = 10
/**
 * Arrivals are handed to the view at most this often: at a thousand events a second a render per
 * network chunk would spend the console's time laying out frames instead of writing lines.
 */
const FLUSH_MS = 100
/** Events waiting for the view beyond this stop the reading of the stream until the view catches up. */
const ARRIVED_MAX = 2000

/** What the tail keeps while the operator is on another tab: where it stopped and its filters. */
interface TailMemory {
  cursor?: string
  types?: string
  orgId?: string
  paused?: boolean
  received?: number
}

/**
 * The lines handed to <Static> in one go. <Static> writes its items once and keeps only the index
 * it reached, so each batch is a new <Static> (a new key): the lines it wrote are dropped, and
 * memory holds at most what arrived since the last frame. A batch is one item of many lines, one
 * text node to lay out rather than one per event.
 */
interface Batch {
  generation: number
  lines: string[]
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
  const [editing, setEditing] = useState<'types' | 'orgId' | null>(null)
  const [batch, setBatch] = useState<Batch>({ generation: 0, lines: [] })
  const written = useRef(-1)
  const arrived = useRef<KassaEvent[]>([])

  useEffect(() => {
    const timer = setInterval(() => {
      if (arrived.current.length === 0) return
      const events = arrived.current
      arrived.current = []
      setReceived((count) => {
        saved.received = count + events.length
        return count + events.length
      })
      const text = events.map((event) => eventLine(event).slice(0, width)).join('\n')
      setBatch((previous) => ({
        generation: previous.generation + 1,
        // A batch not yet written (two flushes between frames) is carried into the next one.
        lines: previous.generation === written.current ? [text] : [...previous.lines, text],
      }))
    }, FLUSH_MS)
    return () => clearInterval(timer)
  }, [saved, width])

  useLayoutEffect(() => {
    written.current = batch.generation
  }, [batch.generation])

  setCapturing(editing !== null)

  useEffect(() => {
    if (paused) {
      setState({ state: 'paused' })
      return
    }
    const stream = followEvents({
      baseUrl: api.baseUrl,
      headers: api.headers(),
      types,
      orgId,
      lastEventId: saved.cursor,
      backlog: BACKLOG,
      onEvents(events) {
        arrived.current.push(...events)
      },
      isFull: () => arrived.current.length > ARRIVED_MAX,
      onState(next, detail) {
        setState({ state: next, detail })
        if (next === 'live') report({ ok: true })
        else if (next === 'refused') report({ ok: false, code: 'refused', message: `event stream: ${detail ?? 'refused'}` })
        else if (next === 'reconnecting') report({ ok: false, code: 'unreachable', message: `event stream: ${detail ?? 'reconnecting'}` })
      },
    })
    return () => {
      saved.cursor = stream.stop()
    }
  }, [paused, types, orgId, api, report, saved])

  const changeFilter = (which: 'types' | 'orgId', value: string) => {
    // A new filter is a new tail: it starts at the end of the log, with a short backlog, and what
    // the old one received but did not show yet is dropped.
    saved.cursor = undefined
    arrived.current = []
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
      saved.cursor = undefined
      arrived.current = []
      saved.types = ''
      saved.orgId = ''
      setTypes('')
      setOrgId('')
    }
  })

  const stateColor = state.state === 'live' ? 'green' : state.state === 'paused' ? 'yellow' : 'red'
  return (
    <Box flexDirection="column">
      <Static key={batch.generation} items={batch.lines}>
        {(text, index) => <Text key={index}>{text}</Text>}
      </Static>
      <Text wrap="truncate">
        <Text bold>Tail</Text> types <Text color={tint('cyan')}>{types === '' ? 'all' : types}</Text> · org{' '}
        <Text color={tint('cyan')}>{orgId === '' ? 'all' : orgId}</Text> · <Text color={tint(stateColor)}>{state.state}</Text>
        {state.detail && state.state !== 'live' ? ` (${state.detail})` : ''} · {received} received
      </Text>
      {paused ? <Outcome message={{ text: `Paused${saved.cursor ? ` after ${saved.cursor}` : ''}: events keep arriving and follow on resume`, tone: 'info' }} /> : null}
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

