import { afterAll, afterEach, beforeAll, describe, expect, test } from 'bun:test'
import { cleanup } from 'ink-testing-library'
import { HELP, parseArgs } from '../../console/args.ts'
import { SCREENS } from '../../console/screens/index.ts'
import { startOperatorFixture, type OperatorFixture } from '../operator/support.ts'
import { TcpProxy } from '../support/tcp-proxy.ts'
import { KEYS, renderConsole } from './support.tsx'

let op: OperatorFixture
beforeAll(async () => {
  op = await startOperatorFixture('Frame Org')
}, 60_000)
afterEach(() => cleanup())
afterAll(async () => {
  await op.close()
}, 30_000)

describe('the frame', () => {
  test('shows the tabs, the keys and the status line with server, environment, connection and last error', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    const frame = await view.shows('No withdrawal is waiting')
    expect(frame).toContain('Kassa console  1 Withdrawals    2 Events')
    expect(frame).toContain('↑↓ select  ⏎ detail  a approve  r reject  g refresh  esc back  ? help  q quit')
    expect(frame).toContain(`${op.baseUrl} · sandbox · connected · last error: none`)
    expect(frame).not.toContain(op.token)
  }, 30_000)

  test('switches screens with their number and tab, and shows the help with ?', async () => {
    const view = renderConsole(op.baseUrl, op.token)
    await view.shows('No withdrawal is waiting')
    view.press('2')
    await view.shows('p pause  t types  o organization  c clear')
    view.press(KEYS.tab)
    await view.shows('p pause  u unpause')
    view.press(KEYS.tab)
    await view.shows('b roll back')
    // Past the last screen, tab comes back to the first.
    view.press(KEYS.tab)
    await view.shows('a approve')
    view.press('?')
    const help = await view.shows('Help')
    for (const [index, screen] of SCREENS.entries()) expect(help).toContain(`${index + 1} ${screen.title}`)
    view.press('?')
    await view.hides('Keyboard only')
  }, 30_000)

  test('a server that goes away shows as unreachable with the error, without stopping; it comes back by itself', async () => {
    const proxy = await TcpProxy.start('127.0.0.1', Number(new URL(op.baseUrl).port))
    try {
      const view = renderConsole(`http://127.0.0.1:${proxy.port}`, op.token)
      await view.shows('· connected · last error: none')
      await proxy.setMode('closed')
      await view.shows(/· unreachable · last error: unreachable: http:\/\/127\.0\.0\.1:\d+ di/)
      view.press('g')
      await proxy.setMode('forwarding')
      await view.shows('· connected · last error: unreachable')
    } finally {
      await proxy.close()
    }
  }, 30_000)
})

describe('the command line', () => {
  test('flags win over the environment; the token is required and never echoed', () => {
    const env = { KASSA_URL: 'http://kassa.internal:3000/', OPERATOR_TOKEN: 'from-env', KASSA_OPERATOR: 'Env Name' }
    expect(parseArgs([], env)).toEqual({ kind: 'run', options: { url: 'http://kassa.internal:3000', token: 'from-env', operator: 'Env Name', refreshMs: 3000, color: true } })
    expect(parseArgs(['--url', 'https://other', '--token=flag-token', '--operator', 'Ada', '--refresh', '0.5'], { ...env, NO_COLOR: '1' })).toEqual({
      kind: 'run',
      options: { url: 'https://other', token: 'flag-token', operator: 'Ada', refreshMs: 500, color: false },
    })
    expect(parseArgs([], { KASSA_URL: 'http://x' })).toEqual({ kind: 'error', message: 'no operator token: set OPERATOR_TOKEN (or pass --token)' })
    expect(parseArgs([], { KASSA_URL: 'ftp://x', OPERATOR_TOKEN: 't' })).toMatchObject({ kind: 'error', message: expect.stringContaining('KASSA_URL must be an http(s) address') })
    const unknown = parseArgs(['--token-secret=abc'], env)
    expect(unknown).toEqual({ kind: 'error', message: 'unknown argument --token (see --help)' })
    expect(parseArgs(['--help'], env)).toEqual({ kind: 'help' })
    expect(HELP).toContain('NO_COLOR')
  })
})
