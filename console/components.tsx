import { TextInput } from '@inkjs/ui'
import { Box, Text, useInput, type Key } from 'ink'
import { useEffect, type RefObject } from 'react'
import { useTint } from './context.tsx'

/** One line of keys, as shown at the foot of a screen. */
export function KeyHints({ keys }: { keys: ReadonlyArray<readonly [string, string]> }) {
  const tint = useTint()
  return (
    <Text wrap="truncate">
      {keys.map(([key, label], index) => (
        <Text key={key}>
          {index > 0 ? '  ' : ''}
          <Text bold color={tint('cyan')}>
            {key}
          </Text>{' '}
          {label}
        </Text>
      ))}
    </Text>
  )
}

/** A one-line text prompt: enter submits, esc cancels. */
export function Prompt({ label, defaultValue = '', onSubmit, onCancel }: { label: string; defaultValue?: string; onSubmit(value: string): void; onCancel(): void }) {
  const tint = useTint()
  useInput((_input, key) => {
    if (key.escape) onCancel()
  })
  return (
    <Box flexDirection="column">
      <Box>
        <Text bold color={tint('yellow')}>
          {label}{' '}
        </Text>
        <TextInput defaultValue={defaultValue} onSubmit={(value) => onSubmit(value.trim())} />
      </Box>
      <Text dimColor>enter to confirm, esc to cancel</Text>
    </Box>
  )
}

/**
 * Takes the answer to a <Confirm> question in the asking screen's own key handler: y calls `yes`,
 * n or esc `no`. The handler, not the question, reads the key: it stays subscribed while the question
 * mounts, so a key pressed as the question appears is not lost.
 */
export function answerConfirm(input: string, key: Key, answer: { yes(): void; no(): void }): void {
  if (input === 'y' || input === 'Y') answer.yes()
  else if (input === 'n' || input === 'N' || key.escape) answer.no()
}

/**
 * Reads a screen's data now and every `refreshMs` while it is mounted; `mounted` says whether it
 * still is, for answers that arrive after the operator left the screen.
 */
export function useRefreshing(refresh: () => Promise<void>, refreshMs: number, mounted: RefObject<boolean>): void {
  useEffect(() => {
    mounted.current = true
    void refresh()
    const timer = setInterval(() => void refresh(), refreshMs)
    return () => {
      mounted.current = false
      clearInterval(timer)
    }
  }, [refresh, refreshMs, mounted])
}

/** A yes/no question; the screen that asks takes the answer with `answerConfirm`. */
export function Confirm({ question }: { question: string }) {
  const tint = useTint()
  return (
    <Box flexDirection="column">
      <Text bold color={tint('yellow')} wrap="wrap">
        {question}
      </Text>
      <Text>
        <Text bold>y</Text> yes <Text bold>n</Text> no
      </Text>
    </Box>
  )
}

/** The result of the last action, where it was taken. */
export function Outcome({ message }: { message: { text: string; tone: 'ok' | 'error' | 'info' } | null }) {
  const tint = useTint()
  if (message === null) return null
  const color = message.tone === 'ok' ? 'green' : message.tone === 'error' ? 'red' : undefined
  return (
    <Text color={color ? tint(color) : undefined} wrap="truncate">
      {message.tone === 'error' ? '✗ ' : message.tone === 'ok' ? '✓ ' : ''}
      {message.text}
    </Text>
  )
}

/** A long id cut to fit: its kind, an ellipsis and its last characters. */
export function shortId(id: string, width = 12): string {
  if (id.length <= width) return id
  const cut = id.indexOf('_')
  const prefix = cut > 0 && cut < 6 ? id.slice(0, cut + 1) : ''
  return `${prefix}…${id.slice(id.length - (width - prefix.length - 1))}`
}

export function fit(text: string, width: number): string {
  if (text.length <= width) return text.padEnd(width)
  return `${text.slice(0, width - 1)}…`
}

export function age(seconds: number): string {
  if (seconds < 60) return `${seconds}s`
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h`
  return `${Math.floor(seconds / 86_400)}d`
}
