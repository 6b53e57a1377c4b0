import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test'
import { cleanup, render } from 'ink-testing-library'
import { OperatorApi } from '../../console/api.ts'
import { ConsoleContext, type ConsoleContextValue } from '../../console/context.tsx'
import { eventsScreen } from '../../console/screens/events.tsx'
import { startOperatorFixture, type OperatorFixture } from '../operator/support.ts'
import { followEvents } from '../../console/event-stream.ts'
import { eventuallyPasses } from '../support/eventually.ts'
import { TcpProxy } from '../support/tcp-proxy.ts'
import { KEYS, renderConsole, withReaders } from './support.tsx'
import { events } from '../../db/schema/index.ts'
import { eventRow } from '../../server/modules/events/write-sets.ts'

let op: OperatorFixture
beforeAll(async () => {
  op = await startOperatorFixture('Tail Org')
}, 60_000)
afterEach(() => cleanup())
afterAll(async () => {
  await op.close()
}, 30_000)

async function openTail(view: ReturnType<typeof renderConsole>) {
  view.press('2')
  await view.shows(/Tail types all · org all · live/)
}

/** Writes `count` events of `type` for the fixture's organization in one transaction, as one commit of many would. */
async function writeEvents(type: string, count: number) {
  const created = new Date()
  const rows = Array.from({ length: count }, (_, index) => eventRow(op.fx.org.id, type, { id: `tick_${index}`, state: 'ok' }, created))
  await op.app.kassa.runtime.db.transaction(async (tx) => {
    for (let start = 0; start < rows.length; start += 1000) await tx.insert(events).values(rows.slice(start, start + 1000))
  })
}

async function filterTypes(view: ReturnType<typeof renderConsole>, types: string) {
  view.press('t')
  await view.shows('Types (exact')
  view.press(types)
  await view.shows(types)
  view.press(KEYS.enter)
  await view.shows(`Tail types ${types} · org all · live`)
}

describe('the Events screen', () => {
  test('shows an event shortly after its creation, across organizations', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    await openTail(view)
    const pending = await op.pendingWithdrawal('901')
    await view.printed(`treasury.withdrawal.pending_approval ${pending.id}`)
    expect(view.frame()).toMatch(/received/)
  }, 30_000)

  test('filters by namespace and by organization', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    await openTail(view)
    view.press('t')
    await view.shows('Types (exact or ns.*')
    view.press('operator.*')
    await view.shows('operator.*')
    view.press(KEYS.enter)
    await view.shows(/Tail types operator\.\* · org all · live/)
    const ignored = await op.pendingWithdrawal('902')
    const approved = await op.pendingWithdrawal('903')
    expect((await op.app.ops('POST', `/ops/v1/withdrawals/${approved.id}/approve`, { operator: 'Filter Tester' })).status).toBe(200)
    await view.shows('operator.action')
    await view.printed('operator.action Filter Tester withdrawal.approve')
    expect(view.everPrinted(ignored.id)).toBe(false)

    view.press('o')
    await view.shows('Organization id')
    view.press('org_nobody')
    await view.shows('org_nobody')
    view.press(KEYS.enter)
    await view.shows(/org org_nobody · live/)
    const count = view.received()
    // An unfiltered follower of the same stream sees the action; the filtered tail does not.
    const seen: string[] = []
    const states: string[] = []
    const follower = followEvents({
      baseUrl: op.baseUrl,
      headers: { authorization: `Bearer ${op.token}` },
      types: 'operator.*',
      orgId: '',
      lastEventId: undefined,
      backlog: 0,
      onEvents: (events) => seen.push(...events.map((event) => String(event.data.operator))),
      onState: (state) => states.push(state),
    })
    await eventuallyPasses(() => expect(states).toContain('live'))
    const hidden = await op.pendingWithdrawal('904')
    expect((await op.app.ops('POST', `/ops/v1/withdrawals/${hidden.id}/approve`, { operator: 'Nobody Sees' })).status).toBe(200)
    await eventuallyPasses(() => expect(seen).toContain('Nobody Sees'))
    follower.stop()
    await view.shows(/org org_nobody · live/)
    expect(view.everPrinted('Nobody Sees')).toBe(false)
    expect(view.received()).toBe(count)
    // The same tail with the organization's id shows it: the filter, not the stream, held it back.
    view.press('o')
    await view.shows('Organization id')
    for (let index = 0; index < 'org_nobody'.length; index++) view.press('\u007F')
    await view.shows(/Organization id \(empty for all\): *\n/)
    view.press(op.fx.org.id)
    await view.shows(op.fx.org.id)
    view.press(KEYS.enter)
    await view.printed('operator.action Nobody Sees')
  }, 30_000)

  test('pause freezes the view while events keep arriving; resume shows each of them once', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    await openTail(view)
    view.press('t')
    await view.shows('Types (exact')
    view.press('treasury.withdrawal.pending_approval')
    await view.shows('treasury.withdrawal.pending_approval')
    view.press(KEYS.enter)
    await view.shows(/types treasury\.withdrawal\.pending_approval · org all · live/)
    const seen = await op.pendingWithdrawal('905')
    await view.printed(seen.id)
    const before = view.received()
    view.press('p')
    await view.shows(/· paused ·/)
    await view.shows(`Paused after evt_`)
    const whilePaused = [await op.pendingWithdrawal('906'), await op.pendingWithdrawal('907')]
    // Frozen: a render after the events were written still does not show them.
    view.press('?')
    await view.shows('Help')
    view.press('?')
    await view.shows('Paused after')
    for (const withdrawal of whilePaused) expect(view.everPrinted(withdrawal.id)).toBe(false)
    expect(view.received()).toBe(before)
    view.press('p')
    await view.shows(/· live ·/)
    for (const withdrawal of whilePaused) await view.printed(withdrawal.id)
    // Exactly the two that arrived while paused, none twice.
    await view.shows(` ${before + 2} received`)
  }, 30_000)

  test('resumes after a dropped connection without losing or repeating an event', async () => {
    const proxy = await TcpProxy.start('127.0.0.1', Number(new URL(op.baseUrl).port))
    try {
      const view = renderConsole(`http://127.0.0.1:${proxy.port}`, op.token)
      await openTail(view)
      view.press('t')
      await view.shows('Types (exact')
      view.press('treasury.withdrawal.pending_approval')
      await view.shows('treasury.withdrawal.pending_approval')
      view.press(KEYS.enter)
      await view.shows(/pending_approval · org all · live/)
      const first = await op.pendingWithdrawal('908')
      await view.printed(first.id)
      const before = view.received()
      await proxy.setMode('closed')
      await view.shows(/reconnecting/)
      const missed = [await op.pendingWithdrawal('909'), await op.pendingWithdrawal('910')]
      await view.shows('unreachable')
      await proxy.setMode('forwarding')
      for (const withdrawal of missed) await view.printed(withdrawal.id)
      await view.shows(/· live ·/)
      await view.shows(` ${before + 2} received`)
    } finally {
      await proxy.close()
    }
  }, 30_000)

  test('while the screen is covered (the help over it) events wait, counted on its status line, and are printed once it shows again', async () => {
    // The screen alone, kept visible, so its status line can be read while it is told it is covered.
    const api = new OperatorApi(op.baseUrl, op.token)
    const context: ConsoleContextValue = { api, color: false, operatorName: 'Ada', setOperatorName: () => {}, refreshMs: 200, report: () => {} }
    const memory = { types: 'treasury.withdrawal.pending_approval' }
    const screen = (active: boolean) => (
      <ConsoleContext.Provider value={context}>
        <eventsScreen.Component active={active} height={20} width={100} setCapturing={() => {}} memory={memory} />
      </ConsoleContext.Provider>
    )
    const view = withReaders(render(screen(true)))
    await view.shows(/pending_approval · org all · live/)
    const first = await op.pendingWithdrawal('910')
    await view.printed(first.id)
    const before = view.received()
    view.rerender(screen(false))
    const covered = [await op.pendingWithdrawal('911'), await op.pendingWithdrawal('912')]
    await view.shows(`${before} received · 2 waiting`)
    for (const withdrawal of covered) expect(view.everPrinted(withdrawal.id)).toBe(false)
    view.rerender(screen(true))
    for (const withdrawal of covered) await view.printed(withdrawal.id)
    await view.shows(` ${before + 2} received`)
    await view.hides('waiting')
  }, 30_000)

  test('leaving the tab and coming back follows from the last event shown: none lost, none twice', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    await openTail(view)
    await filterTypes(view, 'treasury.withdrawal.pending_approval')
    const first = await op.pendingWithdrawal('913')
    await view.printed(first.id)
    const before = view.received()
    view.press('1')
    await view.hides('Tail types')
    const whileAway = [await op.pendingWithdrawal('914'), await op.pendingWithdrawal('915')]
    view.press('2')
    await view.shows('Tail types treasury.withdrawal.pending_approval')
    for (const withdrawal of whileAway) await view.printed(withdrawal.id)
    await view.shows(` ${before + 2} received`)
  }, 30_000)

  test('a burst larger than what the tail holds is shown whole and once: the stream waits for the terminal', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    await openTail(view)
    await filterTypes(view, 'console.burst')
    const before = view.received()
    // More than the 2,000 lines the tail lets wait: reading stops and resumes until all are shown.
    await writeEvents('console.burst', 5000)
    await view.shows(` ${before + 5000} received`, 60_000)
    await view.printed('console.burst tick_0 state=ok')
    await view.printed('console.burst tick_4999 state=ok')
    // One more event: the count moves by exactly one, so none of the burst came twice.
    await writeEvents('console.burst', 1)
    await view.shows(` ${before + 5001} received`)
  }, 90_000)
})
