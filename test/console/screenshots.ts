/**
 * Renders each console screen to an SVG under docs/console/ (run: bun test/console/screenshots.ts).
 * A real server with a few organizations, the real console in a pseudo-terminal, and the terminal's
 * cells (text, colours, bold, inverse) drawn as they are on screen.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { startOperatorFixture } from '../operator/support.ts'
import { seedOrg } from '../operator/seed.ts'
import { runConsole, type ConsoleInTerminal } from './pty.ts'

const OUT = resolve(import.meta.dir, '../../docs/console')
const CELL_WIDTH = 8.4
const CELL_HEIGHT = 17
const PALETTE = ['#1d1f21', '#cc6666', '#b5bd68', '#f0c674', '#81a2be', '#b294bb', '#8abeb7', '#c5c8c6', '#666666', '#d54e53', '#b9ca4a', '#e7c547', '#7aa6da', '#c397d8', '#70c0b1', '#eaeaea']
const FOREGROUND = '#c5c8c6'
const BACKGROUND = '#1d1f21'

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
}

function colourOf(cell: any, which: 'fg' | 'bg'): string | undefined {
  const isDefault = which === 'fg' ? cell.isFgDefault() : cell.isBgDefault()
  if (isDefault) return undefined
  const value = which === 'fg' ? cell.getFgColor() : cell.getBgColor()
  const isRgb = which === 'fg' ? cell.isFgRGB() : cell.isBgRGB()
  if (isRgb) return `#${value.toString(16).padStart(6, '0')}`
  return PALETTE[value] ?? undefined
}

function svgOf(terminal: ConsoleInTerminal): string {
  const xterm = terminal.xterm
  const buffer = xterm.buffer.active
  const parts: string[] = []
  for (let row = 0; row < xterm.rows; row++) {
    const line = buffer.getLine(buffer.viewportY + row)
    if (!line) continue
    for (let column = 0; column < xterm.cols; column++) {
      const cell = line.getCell(column)
      if (!cell) continue
      const chars = cell.getChars()
      let fg = colourOf(cell, 'fg') ?? FOREGROUND
      let bg = colourOf(cell, 'bg')
      if (cell.isInverse()) {
        ;[fg, bg] = [bg ?? BACKGROUND, fg]
      }
      const x = column * CELL_WIDTH
      const y = row * CELL_HEIGHT
      if (bg) parts.push(`<rect x="${x.toFixed(1)}" y="${y}" width="${(CELL_WIDTH * Math.max(1, cell.getWidth())).toFixed(1)}" height="${CELL_HEIGHT}" fill="${bg}"/>`)
      if (chars.trim() === '') continue
      const weight = cell.isBold() ? ' font-weight="bold"' : ''
      const opacity = cell.isDim() ? ' opacity="0.6"' : ''
      parts.push(`<text x="${x.toFixed(1)}" y="${y + 13}" fill="${fg}"${weight}${opacity}>${escapeXml(chars)}</text>`)
    }
  }
  const width = Math.ceil(xterm.cols * CELL_WIDTH) + 16
  const height = xterm.rows * CELL_HEIGHT + 16
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">
<rect width="100%" height="100%" rx="6" fill="${BACKGROUND}"/>
<g transform="translate(8,8)" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="14" xml:space="preserve">
${parts.join('\n')}
</g>
</svg>
`
}

const op = await startOperatorFixture('Acme Payroll')
try {
  const northwind = await seedOrg(op.baseUrl, op.token, 'Northwind Treasury')
  await op.pendingWithdrawal('1250')
  await op.pendingWithdrawal('640.5')
  await northwind.pendingWithdrawal('98000')
  const newest = await northwind.pendingWithdrawal('7300')
  mkdirSync(OUT, { recursive: true })
  const terminal = runConsole({ KASSA_URL: op.baseUrl, OPERATOR_TOKEN: op.token, KASSA_OPERATOR: 'Ada' })
  const save = (name: string) => writeFileSync(resolve(OUT, `${name}.svg`), svgOf(terminal))
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
    save('approved')
    terminal.press('2')
    await terminal.waitFor(/· live · \d+ received/)
    await op.pendingWithdrawal('4200')
    await terminal.waitFor('pending_approval wd_')
    await terminal.waitFor(/live · \d+ received/)
    save('events')
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
