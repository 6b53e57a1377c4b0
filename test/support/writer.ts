import { expect } from 'bun:test'
import type { GroupCommitWriter } from '../../server/ledger/writer.ts'
import type { Kassa } from '../../server/app.ts'
import { eventually } from './eventually.ts'

/** Lets held calls through (see `holdCalls`); `held()` counts the calls held so far. */
export type Release = (() => void) & { held(): number }

/**
 * Holds every call of `target[method]` (an async method) until the returned function is called,
 * then lets them run in the order they were made, and puts the method back.
 */
export function holdCalls(target: object, method: string): Release {
  const internals = target as Record<string, (...args: unknown[]) => Promise<unknown>>
  const real = internals[method]!
  let open!: () => void
  let held = 0
  const gate = new Promise<void>((resolve) => (open = resolve))
  internals[method] = async (...args: unknown[]) => {
    held += 1
    await gate
    return real.apply(target, args)
  }
  const release = () => {
    open()
    internals[method] = real
  }
  return Object.assign(release, { held: () => held })
}

/**
 * Holds the ledger writer's waits for Postgres (batch statements, guarded transactions) until the
 * returned function is called, as a slow database would: batches are sent as usual and stay in
 * flight. Released in order, as Postgres answers one connection's statements.
 */
export function stallWriter(writer: GroupCommitWriter): Release {
  return holdCalls(writer, 'execute')
}

/**
 * Runs `check` while the expiry sweep's commit of the hold `holdId` is in flight: the writer is
 * stalled first, then `advance` moves the organization's clock past the hold's expiry, so no sweep
 * (the app's own, every 250 ms, included) can commit the expiry before `check` runs; where the
 * clock moved first, the app's sweep could take and commit it in between, and the hold was gone.
 * Then lets the commit through and waits for it. The sweep started here or the app's own may be
 * the one that takes the hold.
 */
export async function whileExpiryCommits(kassa: Kassa, holdId: string, advance: () => Promise<void>, check: () => Promise<void>): Promise<void> {
  const runtime = kassa.runtime
  const open = stallWriter(runtime.ledger.writer)
  let sweep: Promise<number> | undefined
  try {
    await advance()
    sweep = kassa.holds.expiry.runOnce()
    await eventually(() => runtime.ledger.holds.get(holdId)?.closing === true, { what: `hold ${holdId} closing`, timeoutMs: 1_000 }).catch(() => {})
    expect(runtime.ledger.holds.get(holdId)).toMatchObject({ closing: true, expiring: true })
    await check()
  } finally {
    open()
  }
  await sweep
  await runtime.ledger.drain()
}
