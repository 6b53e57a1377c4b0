import { render } from 'ink-testing-library'
import { OperatorApi } from '../../console/api.ts'
import { App, type AppProps } from '../../console/app.tsx'
import { eventuallyPasses } from '../support/eventually.ts'

export const KEYS = { enter: '\r', escape: '\u001B', down: '\u001B[B', up: '\u001B[A', right: '\u001B[C', left: '\u001B[D', tab: '\t' }

/** The console's frame rendered by ink-testing-library, talking to a real server at `baseUrl`. */
export function renderConsole(baseUrl: string, token: string, props: Partial<AppProps> = {}) {
  const api = new OperatorApi(baseUrl, token)
  return { ...withReaders(render(<App api={api} environment="sandbox" color={false} operatorName="Ada" refreshMs={200} healthMs={200} {...props} />)), api }
}

/** What a test reads from anything rendered by ink-testing-library: the frame, what was printed, the keys it presses. */
export function withReaders(rendered: ReturnType<typeof render>) {
  const frame = () => rendered.lastFrame() ?? ''
  return {
    ...rendered,
    frame,
    /** Waits until the frame shows `text` (a real server answers, a real timer refreshes). */
    async shows(text: string | RegExp, timeoutMs = 10_000): Promise<string> {
      return eventuallyPasses(
        () => {
          const current = frame()
          const found = typeof text === 'string' ? current.includes(text) : text.test(current)
          if (!found) throw new Error(`the console never showed ${String(text)}; last frame:\n${current}`)
          return current
        },
        { timeoutMs },
      )
    },
    /**
     * Waits until `text` was written at some point: <Static> lines are written once, and the test
     * renderer's last frame holds only the latest batch of them.
     */
    async printed(text: string, timeoutMs = 10_000): Promise<void> {
      await eventuallyPasses(
        () => {
          if (!rendered.frames.some((written) => written.includes(text))) throw new Error(`the console never printed ${text}; last frame:\n${frame()}`)
        },
        { timeoutMs },
      )
    },
    everPrinted(text: string): boolean {
      return rendered.frames.some((written) => written.includes(text))
    },
    /** The tail's count of events received, from its status line. */
    received(): number {
      const match = / (\d+) received/.exec(frame())
      if (!match) throw new Error(`no received count in the frame:\n${frame()}`)
      return Number(match[1])
    },
    async hides(text: string, timeoutMs = 10_000): Promise<void> {
      await eventuallyPasses(
        () => {
          if (frame().includes(text)) throw new Error(`the console still shows ${text}; last frame:\n${frame()}`)
        },
        { timeoutMs },
      )
    },
    press(keys: string) {
      rendered.stdin.write(keys)
    },
  }
}
