import { join, resolve } from 'node:path'
import xterm from '@xterm/headless'
import type { Subprocess } from 'bun'
import { eventuallyPasses } from '../support/eventually.ts'

const REPO_ROOT = resolve(import.meta.dir, '../..')
const BUN = join(REPO_ROOT, 'node_modules/.bin/bun')

/**
 * The real console (`bun console/main.tsx`) in a pseudo-terminal, its output fed to a headless
 * xterm so a test reads the screen a person would see.
 */
export interface ConsoleInTerminal {
  child: Subprocess
  /** The headless terminal the output is drawn on. */
  xterm: InstanceType<typeof xterm.Terminal>
  /** The screen's lines as text. */
  screen(): string
  /** Every byte the console wrote, escape sequences included. */
  raw(): string
  press(keys: string): void
  resize(columns: number, rows: number): void
  waitFor(text: string | RegExp, timeoutMs?: number): Promise<string>
  stop(): Promise<number>
}

export function runConsole(env: Record<string, string>, { columns = 80, rows = 24, args = [] as string[] } = {}): ConsoleInTerminal {
  const screen = new xterm.Terminal({ cols: columns, rows, allowProposedApi: true })
  let raw = ''
  const decoder = new TextDecoder()
  const child = Bun.spawn([BUN, 'console/main.tsx', ...args], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', TERM: 'xterm-256color', FORCE_COLOR: '1', ...env },
    terminal: {
      cols: columns,
      rows,
      data(_terminal, data) {
        const text = decoder.decode(data, { stream: true })
        raw += text
        screen.write(text)
      },
    },
  })
  const text = () => {
    const buffer = screen.buffer.active
    const lines: string[] = []
    for (let index = 0; index < screen.rows; index++) lines.push(buffer.getLine(buffer.viewportY + index)?.translateToString(true) ?? '')
    return lines.join('\n')
  }
  return {
    child,
    xterm: screen,
    screen: text,
    raw: () => raw,
    press(keys) {
      child.terminal!.write(keys)
    },
    resize(newColumns, newRows) {
      screen.resize(newColumns, newRows)
      child.terminal!.resize(newColumns, newRows)
    },
    async waitFor(expected, timeoutMs = 15_000) {
      return eventuallyPasses(
        () => {
          const current = text()
          const found = typeof expected === 'string' ? current.includes(expected) : expected.test(current)
          if (!found) throw new Error(`the terminal never showed ${String(expected)}; screen:\n${current}`)
          return current
        },
        { timeoutMs },
      )
    },
    async stop() {
      if (child.exitCode === null) child.kill()
      const code = await child.exited
      child.terminal?.close()
      screen.dispose()
      return code
    },
  }
}
