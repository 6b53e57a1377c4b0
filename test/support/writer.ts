import type { GroupCommitWriter } from '../../server/ledger/writer.ts'

/**
 * Holds every call of `target[method]` (an async method) until the returned function is called,
 * then lets them run in the order they were made, and puts the method back.
 */
export function holdCalls(target: object, method: string): () => void {
  const internals = target as Record<string, (...args: unknown[]) => Promise<unknown>>
  const real = internals[method]!
  let open!: () => void
  const gate = new Promise<void>((resolve) => (open = resolve))
  internals[method] = async (...args: unknown[]) => {
    await gate
    return real.apply(target, args)
  }
  return () => {
    open()
    internals[method] = real
  }
}

/**
 * Holds the ledger writer's waits for Postgres (batch statements, guarded transactions) until the
 * returned function is called, as a slow database would: batches are sent as usual and stay in
 * flight. Released in order, as Postgres answers one connection's statements.
 */
export function stallWriter(writer: GroupCommitWriter): () => void {
  return holdCalls(writer, 'execute')
}
