import type { GroupCommitWriter } from '../../server/ledger/writer.ts'

/**
 * Holds the ledger writer's waits for Postgres (batch statements, guarded transactions) until the
 * returned function is called, as a slow database would: batches are sent as usual and stay in
 * flight. Released in order, as Postgres answers one connection's statements.
 */
export function stallWriter(writer: GroupCommitWriter): () => void {
  const internals = writer as unknown as { execute: <T>(run: () => Promise<T>) => Promise<T> }
  const realExecute = internals.execute
  let open!: () => void
  const gate = new Promise<void>((resolve) => (open = resolve))
  internals.execute = async <T>(run: () => Promise<T>): Promise<T> => {
    await gate
    return run()
  }
  return () => {
    open()
    internals.execute = realExecute
  }
}
