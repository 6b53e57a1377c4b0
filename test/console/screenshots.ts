/**
 * Renders each console screen to a PNG under docs/console/ (run: bun test/console/screenshots.ts;
 * needs ImageMagick's convert and the DejaVu fonts). A real server with a few organizations, the
 * real console in a pseudo-terminal, and the terminal's cells (text, colours, bold, inverse) drawn
 * as they are on screen.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { startOperatorFixture } from '../operator/support.ts'
import { seedOrg } from '../operator/seed.ts'
import { eventuallyPasses } from '../support/eventually.ts'
import { runConsole, type ConsoleInTerminal } from './pty.ts'

const OUT = resolve(import.meta.dir, '../../docs/console')
const CELL_WIDTH = 8.4
const CELL_HEIGHT = 17
const PALETTE = ['#1d1f21', '#cc6666', '#b5bd68', '#f0c674', '#81a2be', '#b294bb', '#8abeb7', '#c5c8c6', '#666666', '#d54e53', '#b9ca4a', '#e7c547', '#7aa6da', '#c397d8', '#70c0b1', '#eaeaea']
const FOREGROUND = '#c5c8c6'
const BACKGROUND = '#1d1f21'

function colourOf(cell: any, which: 'fg' | 'bg'): string | undefined {
  const isDefault = which === 'fg' ? cell.isFgDefault() : cell.isBgDefault()
  if (isDefault) return undefined
  const value = which === 'fg' ? cell.getFgColor() : cell.getBgColor()
  const isRgb = which === 'fg' ? cell.isFgRGB() : cell.isBgRGB()
  if (isRgb) return `#${value.toString(16).padStart(6, '0')}`
  return PALETTE[value] ?? undefined
}

interface Run {
  column: number
  text: string
  fg: string
  bg: string | undefined
  bold: boolean
  dim: boolean
}

/** A row's cells grouped into runs of one style: one text element each, so letters keep their spacing. */
function runsOf(line: any, columns: number): Run[] {
  const runs: Run[] = []
  for (let column = 0; column < columns; column++) {
    const cell = line.getCell(column)
    if (!cell || cell.getWidth() === 0) continue
    let fg = colourOf(cell, 'fg') ?? FOREGROUND
    let bg = colourOf(cell, 'bg')
    if (cell.isInverse()) [fg, bg] = [bg ?? BACKGROUND, fg]
    const style = { fg, bg, bold: Boolean(cell.isBold()), dim: Boolean(cell.isDim()) }
    const last = runs.at(-1)
    const chars = cell.getChars() || ' '
    if (last && last.fg === style.fg && last.bg === style.bg && last.bold === style.bold && last.dim === style.dim) last.text += chars
    else runs.push({ column, text: chars, ...style })
  }
  return runs
}

const FONT = '/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf'
const FONT_BOLD = '/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf'

function mvgText(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/'/g, "\\'")
}

/**
 * The screen as an ImageMagick drawing (MVG): a rectangle per coloured background run and a text
 * per run of one style, in DejaVu Sans Mono, so the picture keeps the terminal's grid.
 */
function drawingOf(terminal: ConsoleInTerminal): string {
  const xterm = terminal.xterm
  const buffer = xterm.buffer.active
  const parts: string[] = ['font-size 14']
  for (let row = 0; row < xterm.rows; row++) {
    const line = buffer.getLine(buffer.viewportY + row)
    if (!line) continue
    const y = 8 + row * CELL_HEIGHT
    for (const run of runsOf(line, xterm.cols)) {
      const x = 8 + run.column * CELL_WIDTH
      if (run.bg) parts.push(`fill '${run.bg}' rectangle ${x.toFixed(1)},${y} ${(x + run.text.length * CELL_WIDTH).toFixed(1)},${y + CELL_HEIGHT}`)
      if (run.text.trim() === '') continue
      // Each cell on its own column: a glyph wider or narrower than the font's never shifts the rest.
      parts.push(`font '${run.bold ? FONT_BOLD : FONT}' fill '${run.fg}' fill-opacity ${run.dim ? 0.6 : 1}`)
      for (let index = 0; index < run.text.length; index++) {
        const char = run.text[index]!
        if (char === ' ') continue
        parts.push(`text ${(x + index * CELL_WIDTH).toFixed(1)},${y + 13} '${mvgText(char)}'`)
      }
    }
  }
  return parts.join('\n')
}

function savePng(terminal: ConsoleInTerminal, path: string): void {
  const width = Math.ceil(terminal.xterm.cols * CELL_WIDTH) + 16
  const height = terminal.xterm.rows * CELL_HEIGHT + 16
  const drawing = `${path}.mvg`
  writeFileSync(drawing, `viewbox 0 0 ${width} ${height}\nfill '${BACKGROUND}' rectangle 0,0 ${width},${height}\n${drawingOf(terminal)}`)
  const converted = Bun.spawnSync(['convert', `mvg:${drawing}`, path])
  rmSync(drawing)
  if (converted.exitCode !== 0) throw new Error(`convert failed: ${converted.stderr.toString()}`)
}

const op = await startOperatorFixture('Acme Payroll')
try {
  const northwind = await seedOrg(op.baseUrl, op.token, 'Northwind Treasury')
  await op.pendingWithdrawal('1250')
  await op.pendingWithdrawal('640.5')
  await northwind.pendingWithdrawal('98000')
  const newest = await northwind.pendingWithdrawal('7300')
  // Vaults with a week of prices (so an apy), intents waiting in their open cycles.
  const vault = async (body: Record<string, unknown>) => {
    const created = await op.app.ops('POST', '/ops/v1/vaults', { asset: 'USDC', minSubscription: '10', minRedemption: '1', ...body })
    if (created.status !== 201) throw new Error(`creating a vault failed: ${JSON.stringify(created.body)}`)
  }
  await vault({ vaultId: 'usdc-core', name: 'USDC Core', subscriptionFeeBps: 10, dailyRate: '0.00014' })
  await vault({ vaultId: 'usdc-reserve', name: 'USDC Reserve', payoutMode: 'claimable', dailyRate: '0.0001' })
  await op.app.ops('POST', '/ops/v1/vaults/clock/advance', { seconds: 8 * 86_400 })
  await op.app.ops('POST', '/ops/v1/vaults/prices/sync')
  const savers = [op.account, await op.fx.mint('treasury-reserve'), await op.fx.mint('payroll-float')]
  for (const saver of savers.slice(1)) await op.fx.fund(saver, '50000')
  for (const [index, saver] of savers.entries()) {
    await op.fx.call('POST', '/v1/subscriptions', { accountId: saver, vaultId: 'usdc-core', amount: String(2500 * (index + 1)) })
    await op.fx.call('POST', '/v1/subscriptions', { accountId: saver, vaultId: 'usdc-reserve', amount: String(1200 + 300 * index) })
  }
  mkdirSync(OUT, { recursive: true })
  const terminal = runConsole({ KASSA_URL: op.baseUrl, OPERATOR_TOKEN: op.token, KASSA_OPERATOR: 'Ada' })
  const save = (name: string) => savePng(terminal, resolve(OUT, `${name}.png`))
  try {
    await terminal.waitFor(`selected ${newest}`)
    save('withdrawals')
    terminal.press('\r')
    await terminal.waitFor('Quote qt_')
    save('withdrawal-detail')
    terminal.press('a')
    await terminal.waitFor('Operator name: Ada')
    terminal.press('\r')
    await terminal.waitFor('as Ada?')
    save('approve-confirmation')
    terminal.press('y')
    await terminal.waitFor('now approved')
    await terminal.waitFor('3 waiting')
    save('approved')
    terminal.press('2')
    await terminal.waitFor(/· live · \d+ received/)
    await op.pendingWithdrawal('4200')
    await terminal.waitFor('pending_approval wd_')
    await terminal.waitFor(/live · \d+ received/)
    save('events')
    terminal.press('3')
    await terminal.waitFor('selected usdc-core')
    await terminal.waitFor(/usdc-core\s+active\s+[\d.]+\s+\d/)
    save('vaults')
    terminal.press('p')
    await terminal.waitFor('Pause usdc-core (USDC Core)?')
    save('pause-confirmation')
    terminal.press('n')
    await eventuallyPasses(() => {
      if (terminal.screen().includes('Pause usdc-core')) throw new Error('the confirmation is still shown')
    })
    terminal.press('4')
    await terminal.waitFor(/selected vcy_/)
    save('cycles')
    terminal.press('b')
    await terminal.waitFor('Roll back deposit cycle')
    terminal.press('y')
    await terminal.waitFor('Type the vault id (usdc-core) to roll back:')
    terminal.press('usdc-core')
    await terminal.waitFor('to roll back: usdc-core')
    save('rollback-confirmation')
    terminal.press('\u001B')
    await eventuallyPasses(() => {
      if (terminal.screen().includes('Type the vault id')) throw new Error('the prompt is still shown')
    })
    terminal.press('?')
    await terminal.waitFor('Keyboard only')
    save('help')
    terminal.press('q')
  } finally {
    await terminal.stop()
  }
} finally {
  await op.close()
}
console.log(`screenshots written to ${OUT}`)
