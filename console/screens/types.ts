import type { FC } from 'react'

/** What the frame gives a screen. */
export interface ScreenProps {
  /** Lines the screen may use below the tabs and above the keys and status lines. */
  height: number
  width: number
  /** True while the screen takes typed text (a prompt): the frame's own keys (q, ?, tabs) are off. */
  setCapturing(capturing: boolean): void
  /** State kept while the operator is on another tab (the screen is unmounted there). */
  memory: Record<string, unknown>
}

/** A tab of the console. Adding a screen is a file exporting one of these and a line in `./index.ts`. */
export interface ScreenDefinition {
  id: string
  title: string
  /** The screen's own keys, shown at its foot and in the help. */
  keys: ReadonlyArray<readonly [string, string]>
  /** What the help says about the screen. */
  help: string
  Component: FC<ScreenProps>
}
