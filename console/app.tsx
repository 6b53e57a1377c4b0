import { Box, Text, useApp, useInput, useWindowSize } from 'ink'
import { useCallback, useEffect, useMemo, useRef, useState } from 'react'
import type { ApiFailure, OperatorApi } from './api.ts'
import { KeyHints } from './components.tsx'
import { ConsoleContext, type Connection, type ConsoleContextValue } from './context.tsx'
import { SCREENS } from './screens/index.ts'
import type { ScreenDefinition } from './screens/types.ts'

export interface AppProps {
  api: OperatorApi
  environment: string
  color: boolean
  operatorName?: string
  refreshMs?: number
  /** How often the frame checks that the server still answers. */
  healthMs?: number
  screens?: readonly ScreenDefinition[]
}

// Switching screens (their number, tab) is on the tabs line and in the help.
const FRAME_KEYS = [
  ['?', 'help'],
  ['q', 'quit'],
] as const

function Help({ screens }: { screens: readonly ScreenDefinition[] }) {
  // Compact, so that every screen fits 80 × 24: its number, title and keys on one line, its text below.
  return (
    <Box flexDirection="column">
      <Text bold>Help</Text>
      <Text wrap="truncate">Keyboard only. q quits, ? shows or hides this help, 1 to {screens.length} or tab switch screens.</Text>
      {screens.map((screen, index) => (
        <Box key={screen.id} flexDirection="column" flexShrink={0}>
          <Text wrap="truncate">
            <Text bold>
              {index + 1} {screen.title}
            </Text>
            {'  '}
            <KeyHints keys={screen.keys} />
          </Text>
          <Text wrap="wrap">{screen.help}</Text>
        </Box>
      ))}
    </Box>
  )
}

/** The frame: tabs, the active screen, its keys and the status line. It fits the window and follows its resizes. */
export function App({ api, environment, color, operatorName: initialOperator = '', refreshMs = 3000, healthMs = 5000, screens = SCREENS }: AppProps) {
  const { exit } = useApp()
  const { columns, rows } = useWindowSize()
  const [active, setActive] = useState(0)
  const [help, setHelp] = useState(false)
  // A ref, set by the screen while it renders: the frame's key handler stays subscribed and reads
  // it, so no key is lost in the moment between a screen's change and React's effects.
  const capturing = useRef(false)
  const setCapturing = useCallback((value: boolean) => {
    capturing.current = value
  }, [])
  const [connection, setConnection] = useState<Connection>('connected')
  const [lastError, setLastError] = useState<string | null>(null)
  const [operatorName, setOperatorName] = useState(initialOperator)
  const memories = useRef(new Map<string, Record<string, unknown>>())

  const report = useCallback((outcome: { ok: true } | ApiFailure) => {
    if (outcome.ok) {
      setConnection('connected')
      return
    }
    setConnection(outcome.code === 'unreachable' ? 'unreachable' : outcome.code === 'authentication_error' ? 'refused' : 'connected')
    setLastError(`${outcome.code}: ${outcome.message}`)
  }, [])

  useEffect(() => {
    const timer = setInterval(async () => {
      const health = await api.call('GET', '/health')
      if (health.ok) setConnection((current) => (current === 'unreachable' ? 'connected' : current))
      else report(health)
    }, healthMs)
    return () => clearInterval(timer)
  }, [api, healthMs, report])

  useInput((input, key) => {
    if (capturing.current) return
    if (input === 'q') exit()
    else if (input === '?') setHelp((shown) => !shown)
    else if (key.tab) setActive((index) => (index + (key.shift ? screens.length - 1 : 1)) % screens.length)
    else if (/^[1-9]$/.test(input) && Number(input) <= screens.length) {
      setActive(Number(input) - 1)
      setHelp(false)
    }
  })

  const context = useMemo<ConsoleContextValue>(() => ({ api, color, operatorName, setOperatorName, refreshMs, report }), [api, color, operatorName, refreshMs, report])
  const screen = screens[active]!
  let memory = memories.current.get(screen.id)
  if (memory === undefined) {
    memory = {}
    memories.current.set(screen.id, memory)
  }
  // One line short of the window: a frame as tall as the window makes Ink clear the whole screen on every change.
  const height = Math.max(8, rows - 1)
  const bodyHeight = height - 4
  const tint = (name: string) => (color ? name : undefined)
  const connectionColor = connection === 'connected' ? 'green' : 'red'
  return (
    <ConsoleContext.Provider value={context}>
      <Box flexDirection="column" width={columns}>
        <Text wrap="truncate">
          <Text bold color={tint('magenta')}>
            Kassa console
          </Text>
          {screens.map((entry, index) => (
            <Text key={entry.id} inverse={index === active} bold={index === active}>
              {'  '}
              {index + 1} {entry.title}
              {'  '}
            </Text>
          ))}
        </Text>
        <Box display={help ? 'flex' : 'none'} height={help ? bodyHeight : 0} overflow="hidden">
          {help ? <Help screens={screens} /> : null}
        </Box>
        <Box display={help ? 'none' : 'flex'} flexDirection="column">
          <screen.Component key={screen.id} active={!help} height={bodyHeight} width={columns} setCapturing={setCapturing} memory={memory} />
        </Box>
        <KeyHints keys={[...screen.keys, ...FRAME_KEYS]} />
        <Text wrap="truncate">
          <Text dimColor>{api.baseUrl}</Text> · {environment} · <Text color={tint(connectionColor)}>{connection}</Text> · last error:{' '}
          <Text color={lastError ? tint('red') : undefined}>{lastError ?? 'none'}</Text>
        </Text>
      </Box>
    </ConsoleContext.Provider>
  )
}
