import type { FC } from 'react'

/** What the frame gives a screen. */
export interface ScreenProps {
  /** Lines the screen may use below the tabs and above the keys and status lines. */
  height: number
  width: number
  /** False while the help covers the screen: its keys are off. */
  active: boolean
  /**
   * Called by the screen as it renders: true while it takes typed text or a y/n answer, when the
   * frame's own keys (q, ?, tabs) are off.
   */
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
