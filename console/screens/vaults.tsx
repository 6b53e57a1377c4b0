import { Box, Text, useInput } from 'ink'
import { useCallback, useRef, useState } from 'react'
import { newIdempotencyKey } from '../api.ts'
import { answerConfirm, Confirm, fit, Outcome, useRefreshing } from '../components.tsx'
import { useConsole, useTint } from '../context.tsx'
import type { ScreenDefinition, ScreenProps } from './types.ts'
import { cycleTotals, loadVaultRows, percent, sharePrice, type CycleWithPending, type VaultRow } from './vault-data.ts'

type Message = { text: string; tone: 'ok' | 'error' | 'info' } | null

/** A pause or unpause in progress; its Idempotency-Key is made once for the action. */
interface Flow {
  action: 'pause' | 'unpause'
  row: VaultRow
  step: 'confirm' | 'sending'
  idempotencyKey: string
}

const COLUMNS = [
  ['Vault', 13],
  ['State', 6],
  ['Price', 9],
  ['APY', 7],
  ['Deposit cycle', 20],
  ['Redeem cycle', 18],
] as const

function openCycle(entry: CycleWithPending | null, asset: string): string {
  if (entry === null) return '–'
  const totals = cycleTotals(entry, asset)
  return `#${entry.cycle.settlementCycle} ${totals.intents}× ${totals.amount}`
}

function cells(row: VaultRow): string[] {
  return [
    row.vault.vaultId,
    row.vault.state,
    sharePrice(row.price?.sharePrice),
    percent(row.price?.apy),
    openCycle(row.deposit, row.vault.asset),
    openCycle(row.redeem, row.vault.asset),
  ]
}

/** What a pause or an unpause does, with what waits in the vault's open cycles. */
function effect(flow: Flow): string {
  const { row, action } = flow
  const waiting = [row.deposit, row.redeem]
    .filter((entry): entry is CycleWithPending => entry !== null)
    .map((entry) => `${entry.cycle.cycleKind} #${entry.cycle.settlementCycle}: ${cycleTotals(entry, row.vault.asset).intents} intents, ${cycleTotals(entry, row.vault.asset).amount}`)
    .join('; ')
  const what =
    action === 'pause'
      ? 'new subscriptions, redemptions and instant quotes will be refused (conflict); cancels, claims and cycles keep working'
      : 'subscriptions and redemptions will be accepted again'
  return `${action === 'pause' ? 'Pause' : 'Unpause'} ${row.vault.vaultId} (${row.vault.name})? ${what}. Open cycles: ${waiting || 'none'}.`
}

function VaultsScreen({ height, active, setCapturing }: ScreenProps) {
  const { api, report, refreshMs, operatorName } = useConsole()
  const tint = useTint()
  const [rows, setRows] = useState<VaultRow[] | null>(null)
  const [selectedId, setSelectedId] = useState<string | null>(null)
  const [flow, setFlow] = useState<Flow | null>(null)
  const [message, setMessage] = useState<Message>(null)
  const mounted = useRef(true)
  // Bumped by each action's answer: a refresh read before it is stale and is not shown.
  const generation = useRef(0)

  const refresh = useCallback(async () => {
    const started = generation.current
    const answer = await loadVaultRows(api)
    if (!answer.ok) report(answer)
    else report(answer.failure ?? { ok: true })
    if (!mounted.current || started !== generation.current) return
    if (answer.ok) setRows(answer.rows)
  }, [api, report])

  useRefreshing(refresh, refreshMs, mounted)

  setCapturing(flow !== null && flow.step === 'confirm')

  const list = rows ?? []
  const selectedIndex = Math.max(0, list.findIndex((row) => row.vault.vaultId === selectedId))
  const selected = list[selectedIndex]

  const start = (action: Flow['action']) => {
    if (selected === undefined) return
    if ((action === 'pause') === (selected.vault.state === 'paused')) {
      setMessage({ text: `${selected.vault.vaultId} is already ${selected.vault.state}`, tone: 'info' })
      return
    }
    setMessage(null)
    setFlow({ action, row: selected, step: 'confirm', idempotencyKey: newIdempotencyKey(`vault-${action}`) })
  }

  const send = async (current: Flow) => {
    setFlow({ ...current, step: 'sending' })
    const answer = await api.setVaultState(current.row.vault.vaultId, current.action, current.idempotencyKey, operatorName.trim())
    generation.current += 1
    report(answer.ok ? { ok: true } : answer)
    if (!mounted.current) return
    setFlow(null)
    if (answer.ok) {
      setMessage({ text: `${current.action === 'pause' ? 'Paused' : 'Unpaused'} ${answer.value.vaultId}: now ${answer.value.state}`, tone: 'ok' })
      setRows((previous) => previous?.map((row) => (row.vault.vaultId === answer.value.vaultId ? { ...row, vault: { ...row.vault, state: answer.value.state } } : row)) ?? previous)
    } else {
      setMessage({ text: `${current.action} ${current.row.vault.vaultId} refused: ${answer.code}: ${answer.message}`, tone: 'error' })
    }
    await refresh()
  }

  // Always subscribed; it reads the state it needs (see the Withdrawals screen).
  useInput((input, key) => {
    if (!active) return
    if (flow !== null) {
      if (flow.step === 'confirm') answerConfirm(input, key, { yes: () => void send(flow), no: () => setFlow(null) })
      return
    }
    if (key.downArrow || input === 'j') setSelectedId(list[Math.min(list.length - 1, selectedIndex + 1)]?.vault.vaultId ?? null)
    else if (key.upArrow || input === 'k') setSelectedId(list[Math.max(0, selectedIndex - 1)]?.vault.vaultId ?? null)
    else if (input === 'p') start('pause')
    else if (input === 'u') start('unpause')
    else if (input === 'g') void refresh()
  })

  let action = null
  if (flow?.step === 'confirm') action = <Confirm question={effect(flow)} />
  else if (flow?.step === 'sending') action = <Text>{flow.action === 'pause' ? 'Pausing' : 'Unpausing'} {flow.row.vault.vaultId}…</Text>

  const reserved = 3 + (flow === null ? 0 : flow.step === 'confirm' ? 5 : 1)
  const visible = Math.max(1, height - reserved)
  const first = Math.min(Math.max(0, selectedIndex - visible + 1), Math.max(0, list.length - visible))
  return (
    <Box flexDirection="column" height={height}>
      <Text bold wrap="truncate">
        {COLUMNS.map(([name, width]) => fit(name, width)).join(' ')}
      </Text>
      {rows === null ? <Text dimColor>Loading the vaults…</Text> : null}
      {rows !== null && list.length === 0 ? <Text dimColor>No vault yet.</Text> : null}
      {list.slice(first, first + visible).map((row) => {
        const values = cells(row)
        return (
          <Text key={row.vault.vaultId} inverse={row.vault.vaultId === selected?.vault.vaultId} wrap="truncate">
            {COLUMNS.map(([, width], index) => {
              const cell = fit(values[index]!, width)
              if (index === 1 && row.vault.state === 'paused') return <Text key={index} color={tint('yellow')}>{`${cell} `}</Text>
              if (index === 2 && row.price?.stale) return <Text key={index} color={tint('red')}>{`${cell} `}</Text>
              return `${cell} `
            })}
          </Text>
        )
      })}
      <Box flexGrow={1} />
      {action}
      <Text dimColor wrap="truncate">
        {list.length} vaults{selected ? ` · selected ${selected.vault.vaultId} (${selected.vault.name}, ${selected.vault.asset}, payout ${selected.vault.terms.payoutMode})` : ''}
      </Text>
      <Outcome message={message} />
    </Box>
  )
}

export const vaultsScreen: ScreenDefinition = {
  id: 'vaults',
  title: 'Vaults',
  keys: [
    ['↑↓', 'select'],
    ['p', 'pause'],
    ['u', 'unpause'],
    ['g', 'refresh'],
  ],
  help: 'Every vault: state, share price, apy, open deposit and redeem cycles (number, intents, amount). Pause and unpause say what changes and ask y/n.',
  Component: VaultsScreen,
}
