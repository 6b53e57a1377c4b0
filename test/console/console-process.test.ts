import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { join, resolve } from 'node:path'
import { createVault, intentRows, openCycleOf } from '../earning/support.ts'
import { startOperatorFixture, type OperatorFixture } from '../operator/support.ts'
import { eventuallyPasses } from '../support/eventually.ts'
import { runConsole } from './pty.ts'

const REPO_ROOT = resolve(import.meta.dir, '../..')
const BUN = join(REPO_ROOT, 'node_modules/.bin/bun')
/** Colour escapes (SGR foreground and background colours); bold and inverse are not colours. */
const COLOUR = /\u001B\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|4[0-7]|38;5;\d+)m/

let op: OperatorFixture
beforeAll(async () => {
  op = await startOperatorFixture('Terminal Org')
}, 60_000)
afterAll(async () => {
  await op.close()
}, 30_000)

function consoleEnv(extra: Record<string, string> = {}) {
  return { KASSA_URL: op.baseUrl, OPERATOR_TOKEN: op.token, KASSA_OPERATOR: 'Ada', ...extra }
}

async function runOnce(env: Record<string, string>, args: string[] = []) {
  const child = Bun.spawn([BUN, 'console/main.tsx', ...args], { cwd: REPO_ROOT, env: { PATH: process.env.PATH ?? '', ...env }, stdout: 'pipe', stderr: 'pipe', stdin: 'ignore' })
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { stdout, stderr, code }
}

describe('the console process in a terminal', () => {
  test('approves a pending withdrawal: it leaves the queue and its state changes through the API', async () => {
    const pending = await op.pendingWithdrawal('3141')
    const terminal = runConsole(consoleEnv())
    try {
      await terminal.waitFor('3141')
      const screen = terminal.screen()
      expect(screen).toContain('Kassa console')
      expect(screen).toMatch(/127\.0\.0\.1:\d+ · sandbox · connected · last error: none/)
      expect(screen).not.toContain(op.token)
      await terminal.waitFor(`selected ${pending.id}`)
      terminal.press('a')
      await terminal.waitFor('Operator name: Ada')
      terminal.press('\r')
      await terminal.waitFor('as Ada?')
      terminal.press('y')
      await terminal.waitFor(`Approved ${pending.id} as Ada: now approved`)
      await eventuallyPasses(() => expect(terminal.screen()).not.toContain('3141 '))
      const through = await op.fx.call('GET', `/v1/withdrawals/${pending.id}`)
      expect(['approved', 'submitted', 'completed']).toContain(through.body.state)
      expect(through.body.approval.approvedBy).toEqual({ type: 'operator', id: 'Ada' })
      const queue = await op.app.ops('GET', '/ops/v1/withdrawal-approvals')
      expect(queue.body.withdrawals.map((item: { id: string }) => item.id)).not.toContain(pending.id)
      terminal.press('q')
      expect(await terminal.child.exited).toBe(0)
    } finally {
      await terminal.stop()
    }
  }, 60_000)

  test('pauses a vault and rolls back a cycle: the effects show through the API', async () => {
    await createVault(op.app, 'pty-vault')
    const subscribed = await op.fx.call('POST', '/v1/subscriptions', { accountId: op.account, vaultId: 'pty-vault', amount: '250' })
    expect(subscribed.status).toBe(201)
    const cycle = await openCycleOf(op.app, 'pty-vault', 'deposit')
    const terminal = runConsole(consoleEnv())
    try {
      await terminal.waitFor('Kassa console')
      terminal.press('3')
      await terminal.waitFor(/pty-vault\s+active\s+1\s+–\s+#\d+ 1× 250 USDC/)
      await terminal.waitFor('selected pty-vault')
      terminal.press('p')
      await terminal.waitFor('Pause pty-vault (Vault pty-vault)?')
      terminal.press('y')
      await terminal.waitFor('Paused pty-vault: now paused')
      const vaults = await op.app.ops('GET', '/ops/v1/vaults')
      expect(vaults.body.vaults.find((vault: { vaultId: string }) => vault.vaultId === 'pty-vault').state).toBe('paused')
      expect((await op.fx.call('POST', '/v1/subscriptions', { accountId: op.account, vaultId: 'pty-vault', amount: '5' })).status).toBe(409)

      terminal.press('4')
      await terminal.waitFor('‹ pty-vault ›')
      await terminal.waitFor(`selected ${cycle.cycleId}`)
      terminal.press('b')
      const question = await terminal.waitFor(`Roll back deposit cycle #${cycle.settlementCycle} of pty-vault?`)
      expect(question.replace(/\s+/g, ' ')).toMatch(/1 intent cancelled: 250\.000000 USDC back to 1 account \(console-withdrawer\)/)
      terminal.press('y')
      await terminal.waitFor('Type the vault id (pty-vault) to roll back:')
      terminal.press('pty-vault')
      await terminal.waitFor('to roll back: pty-vault')
      terminal.press('\r')
      await terminal.waitFor(`Rolled back deposit cycle #${cycle.settlementCycle} of pty-vault: now rolled_back`)
      const cycles = await op.app.ops('GET', '/ops/v1/vaults/pty-vault/cycles')
      expect(cycles.body.cycles.find((entry: { cycleId: string }) => entry.cycleId === cycle.cycleId).state).toBe('rolled_back')
      expect((await op.fx.call('GET', `/v1/subscriptions/${subscribed.body.id}`)).body).toMatchObject({ state: 'cancelled', reason: 'rollback' })
      expect((await intentRows(op.app, cycle.cycleId)).map((row) => row.state)).toEqual(['cancelled'])
      terminal.press('q')
      expect(await terminal.child.exited).toBe(0)
    } finally {
      await terminal.stop()
    }
  }, 60_000)

  test('tails the event log: an event appears shortly after its creation', async () => {
    const terminal = runConsole(consoleEnv())
    try {
      await terminal.waitFor('Kassa console')
      terminal.press('2')
      await terminal.waitFor(/Tail types all · org all · live/)
      const pending = await op.pendingWithdrawal('2718')
      const line = await terminal.waitFor(`treasury.withdrawal.pending_approval ${pending.id.slice(0, 20)}`)
      expect(line).toMatch(/Tail types all · org all · live · \d+ received/)
    } finally {
      await terminal.stop()
    }
  }, 60_000)

  test('fits the window and follows a resize; help lists every screen', async () => {
    const terminal = runConsole(consoleEnv(), { columns: 80, rows: 24 })
    try {
      await terminal.waitFor('last error: none')
      expect(terminal.screen().split('\n').every((line) => line.length <= 80)).toBe(true)
      const keysRow = () => terminal.screen().split('\n').findIndex((line) => line.includes('? help  q quit'))
      const before = keysRow()
      expect(before).toBeGreaterThan(15)
      expect(before).toBeLessThan(24)
      // The frame grows with the window: its keys and status lines move to the new bottom.
      terminal.resize(120, 30)
      await eventuallyPasses(() => expect(keysRow()).toBe(before + 6))
      terminal.resize(80, 24)
      terminal.press('?')
      const help = await terminal.waitFor('1 Withdrawals')
      expect(help).toContain('2 Events')
    expect(help).toContain('3 Vaults')
    expect(help).toContain('4 Cycles')
      terminal.press('q')
      expect(await terminal.child.exited).toBe(0)
    } finally {
      await terminal.stop()
    }
  }, 60_000)

  test('writes colours, and none with NO_COLOR', async () => {
    const coloured = runConsole(consoleEnv())
    const plain = runConsole(consoleEnv({ NO_COLOR: '1' }))
    try {
      await coloured.waitFor('last error: none')
      await plain.waitFor('last error: none')
      expect(coloured.raw()).toMatch(COLOUR)
      expect(plain.raw()).not.toMatch(COLOUR)
    } finally {
      await coloured.stop()
      await plain.stop()
    }
  }, 60_000)

  test('an unreachable server or a refused token is one line and a non-zero exit; --help lists flags and keys', async () => {
    const closedPort = await (async () => {
      const server = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('') })
      const port = server.port
      await server.stop(true)
      return port
    })()
    const unreachable = await runOnce({ KASSA_URL: `http://127.0.0.1:${closedPort}`, OPERATOR_TOKEN: op.token })
    expect(unreachable.code).toBe(1)
    expect(unreachable.stderr).toBe(`kassa console: cannot reach Kassa at http://127.0.0.1:${closedPort}\n`)

    const wrongToken = 'a-wrong-operator-token-of-enough-length'
    const refused = await runOnce({ KASSA_URL: op.baseUrl, OPERATOR_TOKEN: wrongToken })
    expect(refused.code).toBe(1)
    expect(refused.stderr).toBe(`kassa console: Kassa at ${op.baseUrl} refused the operator token\n`)
    expect(refused.stdout + refused.stderr).not.toContain(wrongToken)

    const missing = await runOnce({ KASSA_URL: op.baseUrl })
    expect(missing.code).toBe(2)
    expect(missing.stderr).toBe('kassa console: no operator token: set OPERATOR_TOKEN (or pass --token)\n')

    const help = await runOnce({}, ['--help'])
    expect(help.code).toBe(0)
    for (const flag of ['--url', '--token', '--operator', '--refresh', 'KASSA_URL', 'OPERATOR_TOKEN', 'NO_COLOR']) expect(help.stdout).toContain(flag)
    for (const key of ['a approve', 'r reject', 'p pause/resume', 'p pause, u unpause', 'b roll back', '?   help', 'q ']) expect(help.stdout).toContain(key)
  }, 60_000)
})
