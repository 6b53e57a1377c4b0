import { createContext, useContext } from 'react'
import type { ApiFailure, OperatorApi } from './api.ts'

export type Connection = 'connecting' | 'connected' | 'unreachable' | 'refused'

export interface ConsoleContextValue {
  api: OperatorApi
  /** False with NO_COLOR: components then pass no colours to Ink. */
  color: boolean
  /** The operator name offered in prompts (from --operator or KASSA_OPERATOR), changed by the last one typed. */
  operatorName: string
  setOperatorName(name: string): void
  /** How often lists refresh themselves. */
  refreshMs: number
  /** Every API answer goes here, so the status line shows the connection and the last error. */
  report(outcome: { ok: true } | ApiFailure): void
}

export const ConsoleContext = createContext<ConsoleContextValue | undefined>(undefined)

export function useConsole(): ConsoleContextValue {
  const value = useContext(ConsoleContext)
  if (value === undefined) throw new Error('useConsole outside the console frame')
  return value
}

/** A colour when colours are on, nothing with NO_COLOR. */
export function useTint(): (color: string) => string | undefined {
  const { color } = useConsole()
  return (name) => (color ? name : undefined)
}
