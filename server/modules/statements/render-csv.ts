import type { SignedStatement } from './document.ts'

const HEADER = ['line', 'booked_at', 'movement_id', 'kind', 'reference', 'amount', 'balance_after']

function cell(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value
}

/**
 * The statement as CSV (RFC 4180, CRLF): one row per line, between an opening and a closing row
 * (line numbers `opening` and `closing`, no movement), so a spreadsheet's running sum can be
 * checked against balance_after. The hash and signature are in the JSON and PDF forms.
 */
export function statementCsv(statement: SignedStatement): string {
  const rows: string[][] = [HEADER]
  rows.push(['opening', statement.periodStart, '', '', '', '', statement.openingBalance])
  for (const [index, line] of statement.lines.entries()) {
    rows.push([String(index + 1), line.bookedAt, line.movementId, line.kind, line.reference, line.amount, line.balanceAfter])
  }
  rows.push(['closing', statement.periodEnd, '', '', '', '', statement.closingBalance])
  return `${rows.map((row) => row.map(cell).join(',')).join('\r\n')}\r\n`
}
