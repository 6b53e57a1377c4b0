import { PDFDocument, rgb, StandardFonts, type PDFFont, type PDFPage } from 'pdf-lib'
import { decimalsOf, minorOf, type SignedStatement } from './document.ts'

/** A4 in points. */
const PAGE_WIDTH = 595.28
const PAGE_HEIGHT = 841.89
const MARGIN = 48
const ROW_HEIGHT = 17
const INK = rgb(0.12, 0.14, 0.18)
const MUTED = rgb(0.42, 0.45, 0.5)
const RULE = rgb(0.82, 0.84, 0.87)
const BAND = rgb(0.95, 0.96, 0.97)
const ACCENT = rgb(0.07, 0.33, 0.45)

/** Table columns: left edge and width; amounts are right-aligned in theirs. */
const COLUMNS = {
  booked: { x: MARGIN, width: 92 },
  description: { x: MARGIN + 96, width: 185 },
  debit: { x: MARGIN + 285, width: 70 },
  credit: { x: MARGIN + 359, width: 70 },
  balance: { x: MARGIN + 433, width: PAGE_WIDTH - 2 * MARGIN - 433 },
}

interface Fonts {
  regular: PDFFont
  bold: PDFFont
  mono: PDFFont
}

function localTime(iso: string, timeZone: string): string {
  const parts = new Intl.DateTimeFormat('en-CA', { timeZone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' }).formatToParts(new Date(iso))
  const part = (type: string) => parts.find((item) => item.type === type)?.value ?? ''
  return `${part('year')}-${part('month')}-${part('day')} ${part('hour')}:${part('minute')}:${part('second')}`
}

function humanKind(kind: string): string {
  const text = kind.replaceAll('_', ' ')
  return text.charAt(0).toUpperCase() + text.slice(1)
}

/** Groups the whole part of a decimal amount in thousands: 1234567.50 becomes 1,234,567.50. */
function grouped(amount: string): string {
  const negative = amount.startsWith('-')
  const [whole, fraction] = (negative ? amount.slice(1) : amount).split('.')
  const text = whole!.replace(/\B(?=(\d{3})+(?!\d))/g, ',') + (fraction === undefined ? '' : `.${fraction}`)
  return negative ? `-${text}` : text
}

function fit(text: string, font: PDFFont, size: number, width: number): string {
  if (font.widthOfTextAtSize(text, size) <= width) return text
  let cut = text
  while (cut.length > 1 && font.widthOfTextAtSize(`${cut}...`, size) > width) cut = cut.slice(0, -1)
  return `${cut}...`
}

function right(page: PDFPage, text: string, xRight: number, y: number, font: PDFFont, size: number, color = INK): void {
  page.drawText(text, { x: xRight - font.widthOfTextAtSize(text, size), y, size, font, color })
}

/** Sums of the credits and debits of a statement, in its decimals. */
function totals(statement: SignedStatement): { credits: string; debits: string } {
  const decimals = decimalsOf(statement.openingBalance)
  let credits = 0n
  let debits = 0n
  for (const line of statement.lines) {
    const amount = minorOf(line.amount, decimals) ?? 0n
    if (amount >= 0n) credits += amount
    else debits -= amount
  }
  const format = (minor: bigint) => {
    const digits = minor.toString().padStart(decimals + 1, '0')
    return decimals === 0 ? digits : `${digits.slice(0, -decimals)}.${digits.slice(-decimals)}`
  }
  return { credits: format(credits), debits: format(debits) }
}

function drawHeader(page: PDFPage, fonts: Fonts, statement: SignedStatement, pageNumber: number): number {
  page.drawRectangle({ x: 0, y: PAGE_HEIGHT - 6, width: PAGE_WIDTH, height: 6, color: ACCENT })
  let y = PAGE_HEIGHT - MARGIN
  page.drawText('Kassa', { x: MARGIN, y: y - 6, size: 22, font: fonts.bold, color: ACCENT })
  page.drawText('Digital asset accounts', { x: MARGIN, y: y - 20, size: 8.5, font: fonts.regular, color: MUTED })
  right(page, 'Account statement', PAGE_WIDTH - MARGIN, y - 4, fonts.bold, 15)
  right(page, `Business date ${statement.businessDate}`, PAGE_WIDTH - MARGIN, y - 20, fonts.regular, 10, MUTED)
  y -= 44
  page.drawLine({ start: { x: MARGIN, y }, end: { x: PAGE_WIDTH - MARGIN, y }, thickness: 0.8, color: RULE })
  if (pageNumber > 1) {
    y -= 16
    page.drawText(`${statement.accountId}  ${statement.asset}  (continued)`, { x: MARGIN, y, size: 9, font: fonts.regular, color: MUTED })
    y -= 8
  }
  return y
}

function drawDetails(page: PDFPage, fonts: Fonts, statement: SignedStatement, yTop: number): number {
  let y = yTop - 22
  const label = (text: string, x: number, yy: number) => page.drawText(text, { x, y: yy, size: 8, font: fonts.regular, color: MUTED })
  const value = (text: string, x: number, yy: number, font = fonts.regular) => page.drawText(text, { x, y: yy, size: 10, font, color: INK })
  const cutoff = statement.cutoffHour === 0 ? '24:00 (midnight)' : `${String(statement.cutoffHour).padStart(2, '0')}:00`
  label('ACCOUNT', MARGIN, y)
  label('ASSET', MARGIN + 300, y)
  value(statement.accountId, MARGIN, y - 13, fonts.mono)
  value(statement.asset, MARGIN + 300, y - 13, fonts.bold)
  y -= 34
  label('STATEMENT PERIOD', MARGIN, y)
  label('TIME ZONE AND CUT-OFF', MARGIN + 300, y)
  value(`${localTime(statement.periodStart, statement.timeZone)}  to  ${localTime(statement.periodEnd, statement.timeZone)}`, MARGIN, y - 13)
  value(`${statement.timeZone}, ${cutoff}`, MARGIN + 300, y - 13)
  y -= 34
  label('STATEMENT', MARGIN, y)
  label('SEALED', MARGIN + 300, y)
  value(statement.id, MARGIN, y - 13, fonts.mono)
  value(localTime(statement.sealedAt, statement.timeZone), MARGIN + 300, y - 13)
  y -= 30

  // The summary band: what a reader looks for first.
  const { credits, debits } = totals(statement)
  const bandHeight = 46
  page.drawRectangle({ x: MARGIN, y: y - bandHeight, width: PAGE_WIDTH - 2 * MARGIN, height: bandHeight, color: BAND })
  const cells = [
    ['Opening balance', statement.openingBalance],
    ['Credits', credits],
    ['Debits', debits === '0' || /^0(\.0+)?$/.test(debits) ? debits : `-${debits}`],
    ['Closing balance', statement.closingBalance],
  ] as const
  const cellWidth = (PAGE_WIDTH - 2 * MARGIN) / cells.length
  cells.forEach(([name, amount], index) => {
    const x = MARGIN + index * cellWidth + 12
    page.drawText(name.toUpperCase(), { x, y: y - 16, size: 7.5, font: fonts.regular, color: MUTED })
    page.drawText(`${grouped(amount)} ${statement.asset}`, { x, y: y - 34, size: index === 3 ? 11.5 : 10.5, font: index === 3 ? fonts.bold : fonts.regular, color: INK })
  })
  return y - bandHeight - 18
}

function drawTableHead(page: PDFPage, fonts: Fonts, y: number): number {
  const size = 8
  page.drawText('BOOKED (LOCAL)', { x: COLUMNS.booked.x, y, size, font: fonts.bold, color: MUTED })
  page.drawText('DESCRIPTION', { x: COLUMNS.description.x, y, size, font: fonts.bold, color: MUTED })
  right(page, 'DEBIT', COLUMNS.debit.x + COLUMNS.debit.width, y, fonts.bold, size, MUTED)
  right(page, 'CREDIT', COLUMNS.credit.x + COLUMNS.credit.width, y, fonts.bold, size, MUTED)
  right(page, 'BALANCE', COLUMNS.balance.x + COLUMNS.balance.width, y, fonts.bold, size, MUTED)
  page.drawLine({ start: { x: MARGIN, y: y - 5 }, end: { x: PAGE_WIDTH - MARGIN, y: y - 5 }, thickness: 0.8, color: RULE })
  return y - ROW_HEIGHT - 2
}

function drawRow(page: PDFPage, fonts: Fonts, y: number, cells: { booked: string; description: string; debit: string; credit: string; balance: string }, shaded: boolean, bold = false): void {
  const size = 8.5
  const font = bold ? fonts.bold : fonts.regular
  if (shaded) page.drawRectangle({ x: MARGIN, y: y - 5, width: PAGE_WIDTH - 2 * MARGIN, height: ROW_HEIGHT, color: BAND })
  page.drawText(cells.booked, { x: COLUMNS.booked.x + 2, y, size, font, color: INK })
  page.drawText(fit(cells.description, font, size, COLUMNS.description.width), { x: COLUMNS.description.x, y, size, font, color: INK })
  right(page, cells.debit, COLUMNS.debit.x + COLUMNS.debit.width, y, font, size)
  right(page, cells.credit, COLUMNS.credit.x + COLUMNS.credit.width, y, font, size)
  right(page, cells.balance, COLUMNS.balance.x + COLUMNS.balance.width - 2, y, font, size)
}

function drawFooter(page: PDFPage, fonts: Fonts, statement: SignedStatement, pageNumber: number, pages: number): void {
  let y = MARGIN + 44
  page.drawLine({ start: { x: MARGIN, y: y + 12 }, end: { x: PAGE_WIDTH - MARGIN, y: y + 12 }, thickness: 0.8, color: RULE })
  const check = statement.invariantOk
    ? 'Balances verified: opening balance plus the lines equals the closing balance, which equals the ledger at the cut-off.'
    : 'WARNING: this statement recorded a difference between its lines and the ledger at the cut-off.'
  page.drawText(check, { x: MARGIN, y, size: 7.5, font: statement.invariantOk ? fonts.regular : fonts.bold, color: statement.invariantOk ? MUTED : rgb(0.7, 0.1, 0.1) })
  y -= 11
  page.drawText(`SHA-256 ${statement.hash}`, { x: MARGIN, y, size: 7, font: fonts.mono, color: MUTED })
  y -= 10
  page.drawText(`Previous ${statement.previousHash ?? 'none (first statement of this account and asset)'}`, { x: MARGIN, y, size: 7, font: fonts.mono, color: MUTED })
  y -= 10
  page.drawText(`Sealed and signed (Ed25519, key ${statement.keyId}); verify offline against /.well-known/jwks.json.`, { x: MARGIN, y, size: 7, font: fonts.regular, color: MUTED })
  right(page, `Page ${pageNumber} of ${pages}`, PAGE_WIDTH - MARGIN, MARGIN - 14, fonts.regular, 7.5, MUTED)
}

/** A printable statement: header, details, summary, the lines with a running balance, and the seal on every page. */
export async function statementPdf(statement: SignedStatement): Promise<Uint8Array> {
  const document = await PDFDocument.create()
  document.setTitle(`Kassa statement ${statement.accountId} ${statement.asset} ${statement.businessDate}`)
  document.setAuthor('Kassa')
  document.setSubject(`Statement ${statement.id}`)
  document.setCreationDate(new Date(statement.sealedAt))
  document.setModificationDate(new Date(statement.sealedAt))
  document.setProducer('Kassa (pdf-lib)')
  const fonts: Fonts = {
    regular: await document.embedFont(StandardFonts.Helvetica),
    bold: await document.embedFont(StandardFonts.HelveticaBold),
    mono: await document.embedFont(StandardFonts.Courier),
  }
  const rows = [
    { booked: localTime(statement.periodStart, statement.timeZone), description: 'Opening balance', debit: '', credit: '', balance: grouped(statement.openingBalance), bold: true },
    ...statement.lines.map((line) => ({
      booked: localTime(line.bookedAt, statement.timeZone),
      description: `${humanKind(line.kind)}  ${line.reference}`,
      debit: line.amount.startsWith('-') ? grouped(line.amount.slice(1)) : '',
      credit: line.amount.startsWith('-') ? '' : grouped(line.amount),
      balance: grouped(line.balanceAfter),
      bold: false,
    })),
    { booked: localTime(statement.periodEnd, statement.timeZone), description: 'Closing balance', debit: '', credit: '', balance: grouped(statement.closingBalance), bold: true },
  ]
  const footerTop = MARGIN + 62
  const pages: PDFPage[] = []
  let page = document.addPage([PAGE_WIDTH, PAGE_HEIGHT])
  pages.push(page)
  let y = drawTableHead(page, fonts, drawDetails(page, fonts, statement, drawHeader(page, fonts, statement, 1)))
  rows.forEach((row, index) => {
    if (y < footerTop) {
      page = document.addPage([PAGE_WIDTH, PAGE_HEIGHT])
      pages.push(page)
      y = drawTableHead(page, fonts, drawHeader(page, fonts, statement, pages.length) - 20)
    }
    drawRow(page, fonts, y, row, index % 2 === 1, row.bold)
    y -= ROW_HEIGHT
  })
  if (statement.lines.length === 0) page.drawText('No movements in this period.', { x: COLUMNS.description.x, y: y - 4, size: 8.5, font: fonts.regular, color: MUTED })
  pages.forEach((each, index) => drawFooter(each, fonts, statement, index + 1, pages.length))
  return document.save({ useObjectStreams: false })
}
