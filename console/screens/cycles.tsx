import { Box, Text, useInput } from 'ink'
import { useCallback, useRef, useState } from 'react'
import { newIdempotencyKey, type CycleAction, type CycleIntentsInfo, type VaultInfo } from '../api.ts'
import { answerConfirm, Confirm, fit, Outcome, Prompt, useRefreshing } from '../components.tsx'
import { useConsole, useTint } from '../context.tsx'
import type { ScreenDefinition, ScreenProps } from './types.ts'
import { addDecimals, cycleTotals, sharePrice, withPending, type CycleWithPending } from './vault-data.ts'

type Message = { text: string; tone: 'ok' | 'error' | 'info' } | null

/** A close, settle or roll back in progress: the cycle read afresh for its effect, and one Idempotency-Key. */
interface Flow {
  action: CycleAction
  vault: VaultInfo
  info: CycleIntentsInfo
  step: 'confirm' | 'type' | 'sending'
  idempotencyKey: string
}

/** The screen's memory: the vault shown, kept while the operator is on another tab. */
interface CyclesMemory {
  vaultId?: string
}

const COLUMNS = [
  ['Cycle', 6],
  ['Kind', 8],
  ['State', 11],
  ['Intents', 7],
  ['Amount', 18],
  ['Price', 9],
  ['Opened', 12],
] as const

const VERBS: Record<CycleAction, [string, string, string]> = {
  close: ['Close', 'Closing', 'Closed'],
  settle: ['Settle', 'Settling', 'Settled'],
  rollback: ['Roll back', 'Rolling back', 'Rolled back'],
}

function cells(entry: CycleWithPending, asset: string): string[] {
  const { cycle } = entry
  const totals = cycleTotals(entry, asset)
  return [`#${cycle.settlementCycle}`, cycle.cycleKind, cycle.state, totals.intents, totals.amount, sharePrice(cycle.sharePrice), cycle.openedAt.slice(5, 16).replace('T', ' ')]
}

/** Whose intents they are: the accounts' ids in their organizations, the first few. */
function owners(info: CycleIntentsInfo): string {
  const names = [...new Set(info.intents.filter((intent) => intent.state === 'confirmed').map((intent) => intent.externalId))]
  if (names.length === 0) return 'nobody'
  const shown = names.slice(0, 4).join(', ')
  const more = info.pending.accounts - Math.min(4, names.length)
  return more > 0 ? `${shown} and ${more} more` : shown
}

/** What the action will do, in the operator's words: how many intents, what amount, to whom. */
export function cycleEffect(action: CycleAction, vault: VaultInfo, info: CycleIntentsInfo): string {
  const { cycle, pending } = info
  const name = `${cycle.cycleKind} cycle #${cycle.settlementCycle} of ${vault.vaultId}`
  if (cycle.state === 'settled' || cycle.state === 'rolled_back') return `${VERBS[action][0]} ${name}? It is already ${cycle.state}: the server answers it as it is or refuses.`
  const count = `${pending.intents} intent${pending.intents === 1 ? '' : 's'}`
  const accounts = `${pending.accounts} account${pending.accounts === 1 ? '' : 's'} (${owners(info)})`
  const deposit = cycle.cycleKind === 'deposit'
  if (action === 'close') {
    const held = deposit ? `${pending.amount} ${vault.asset}` : `${pending.shares} shares`
    return `Close ${name}? ${count} (${held}) of ${accounts} wait for settlement; new intents go to cycle #${cycle.settlementCycle + 1}.`
  }
  if (action === 'settle') {
    if (deposit) return `Settle ${name} at a fresh venue price? ${count}: ${pending.amount} ${vault.asset} buy shares for ${accounts}.`
    const paid = vault.terms.payoutMode === 'direct' ? 'paid to the available balance of' : 'made claimable by'
    return `Settle ${name} at a fresh venue price? ${count}: ${pending.shares} shares redeemed, proceeds ${paid} ${accounts}.`
  }
  if (deposit) {
    const fees = /^0(\.0*)?$/.test(pending.fee) ? '' : ` (${pending.amount} + ${pending.fee} fees)`
    return `Roll back ${name}? ${count} cancelled: ${addDecimals(pending.amount, pending.fee)} ${vault.asset}${fees} back to ${accounts}.`
  }
  return `Roll back ${name}? ${count} cancelled: ${pending.shares} shares unlocked back to ${accounts}.`
}

function CyclesScreen({ height, active, setCapturing, memory }: ScreenProps) {
  const { api, report, refreshMs, operatorName } = useConsole()
  const tint = useTint()
  const saved = memory as CyclesMemory
  const [vaults, setVaults] = useState<VaultInfo[] | null>(null)
  const [vaultId, setVaultId] = useState<string | undefined>(saved.vaultId)
  const [entries, setEntries] = useState<CycleWithPending[] | null>(null)
  const [selectedId, setSelectedId] = useState<string | null>(null)
  const [flow, setFlow] = useState<Flow | null>(null)
  const [message, setMessage] = useState<Message>(null)
  const mounted = useRef(true)

  const vaultList = vaults ?? []
  const vault = vaultList.find((entry) => entry.vaultId === vaultId) ?? vaultList[0]

  const refresh = useCallback(async () => {
    const list = await api.vaults()
    report(list.ok ? { ok: true } : list)
    if (!mounted.current || !list.ok) return
    setVaults(list.value.vaults)
    const shown = list.value.vaults.find((entry) => entry.vaultId === vaultId) ?? list.value.vaults[0]
    if (shown === undefined) return setEntries([])
    const cycles = await api.cycles(shown.vaultId)
    if (!cycles.ok) return report(cycles)
    const read = await withPending(api, cycles.value.cycles)
    if (read.failure) report(read.failure)
    if (!mounted.current) return
    setEntries(read.entries)
    // The selection is pinned to a cycle, not a row: a close or roll back lists the next cycle
    // above it, and the next key must still act on the cycle the operator was looking at.
    setSelectedId((current) => (read.entries.some((entry) => entry.cycle.cycleId === current) ? current : (read.entries[0]?.cycle.cycleId ?? null)))
  }, [api, report, vaultId])

  useRefreshing(refresh, refreshMs, mounted)

  setCapturing(flow !== null && flow.step !== 'sending')

  const list = entries ?? []
  const selectedIndex = Math.max(0, list.findIndex((entry) => entry.cycle.cycleId === selectedId))
  const selected = list[selectedIndex]

  const switchVault = (step: number) => {
    if (vault === undefined || vaultList.length < 2) return
    const index = vaultList.findIndex((entry) => entry.vaultId === vault.vaultId)
    const next = vaultList[(index + step + vaultList.length) % vaultList.length]!
    saved.vaultId = next.vaultId
    setVaultId(next.vaultId)
    setEntries(null)
    setSelectedId(null)
    setMessage(null)
  }

  const start = async (action: CycleAction) => {
    if (selected === undefined || vault === undefined) return
    setMessage(null)
    // The effect is read afresh: intents may have joined since the list was drawn.
    const read = await api.cycleIntents(selected.cycle.cycleId)
    report(read.ok ? { ok: true } : read)
    if (!mounted.current) return
    if (!read.ok) return setMessage({ text: `${VERBS[action][0].toLowerCase()} #${selected.cycle.settlementCycle}: ${read.code}: ${read.message}`, tone: 'error' })
    setFlow({ action, vault, info: read.value, step: 'confirm', idempotencyKey: newIdempotencyKey(`cycle-${action}`) })
  }

  const send = async (current: Flow) => {
    setFlow({ ...current, step: 'sending' })
    const { cycle } = current.info
    const answer = await api.cycleAction(cycle.cycleId, current.action, current.idempotencyKey, operatorName.trim())
    report(answer.ok ? { ok: true } : answer)
    if (!mounted.current) return
    setFlow(null)
    if (answer.ok) setMessage({ text: `${VERBS[current.action][2]} ${cycle.cycleKind} cycle #${cycle.settlementCycle} of ${current.vault.vaultId}: now ${answer.value.state}`, tone: 'ok' })
    else setMessage({ text: `${VERBS[current.action][0].toLowerCase()} ${cycle.cycleKind} #${cycle.settlementCycle} refused: ${answer.code}: ${answer.message}`, tone: 'error' })
    await refresh()
  }

  // Always subscribed; it reads the state it needs (see the Withdrawals screen).
  useInput((input, key) => {
    if (!active) return
    if (flow !== null) {
      if (flow.step !== 'confirm') return
      answerConfirm(input, key, {
        // A roll back asks for the vault id too before it is sent.
        yes: () => (flow.action === 'rollback' ? setFlow({ ...flow, step: 'type' }) : void send(flow)),
        no: () => setFlow(null),
      })
      return
    }
    if (key.downArrow || input === 'j') setSelectedId(list[Math.min(list.length - 1, selectedIndex + 1)]?.cycle.cycleId ?? null)
    else if (key.upArrow || input === 'k') setSelectedId(list[Math.max(0, selectedIndex - 1)]?.cycle.cycleId ?? null)
    else if (key.rightArrow || input === 'l') switchVault(1)
    else if (key.leftArrow || input === 'h') switchVault(-1)
    else if (input === 'c') void start('close')
    else if (input === 's') void start('settle')
    else if (input === 'b') void start('rollback')
    else if (input === 'g') void refresh()
  })

  let action = null
  if (flow?.step === 'confirm') action = <Confirm question={cycleEffect(flow.action, flow.vault, flow.info)} />
  else if (flow?.step === 'type')
    action = (
      <Box flexDirection="column">
        <Text bold color={tint('yellow')} wrap="wrap">
          {cycleEffect(flow.action, flow.vault, flow.info)}
        </Text>
        <Prompt
          key="vault-id"
          label={`Type the vault id (${flow.vault.vaultId}) to roll back:`}
          onCancel={() => setFlow(null)}
          onSubmit={(typed) => {
            if (typed === flow.vault.vaultId) void send(flow)
            else {
              setFlow(null)
              setMessage({ text: `"${typed}" is not ${flow.vault.vaultId}: nothing was rolled back`, tone: 'error' })
            }
          }}
        />
      </Box>
    )
  else if (flow?.step === 'sending') action = <Text>{VERBS[flow.action][1]} cycle #{flow.info.cycle.settlementCycle}…</Text>

  const reserved = 4 + (flow === null ? 0 : flow.step === 'sending' ? 1 : 5)
  const visible = Math.max(1, height - reserved)
  const first = Math.min(Math.max(0, selectedIndex - visible + 1), Math.max(0, list.length - visible))
  return (
    <Box flexDirection="column" height={height}>
      <Text wrap="truncate">
        <Text bold>Vault </Text>
        {vault === undefined ? (
          <Text dimColor>{vaults === null ? 'loading…' : 'none yet'}</Text>
        ) : (
          <Text>
            ‹ <Text bold>{vault.vaultId}</Text> › {vault.name} · {vault.state} · payout {vault.terms.payoutMode} · {vaultList.findIndex((entry) => entry.vaultId === vault.vaultId) + 1} of {vaultList.length}
          </Text>
        )}
      </Text>
      <Text bold wrap="truncate">
        {COLUMNS.map(([name, width]) => fit(name, width)).join(' ')}
      </Text>
      {vault !== undefined && entries === null ? <Text dimColor>Loading the cycles…</Text> : null}
      {list.slice(first, first + visible).map((entry) => {
        const values = cells(entry, vault?.asset ?? '')
        return (
          <Text key={entry.cycle.cycleId} inverse={entry.cycle.cycleId === selected?.cycle.cycleId} wrap="truncate">
            {COLUMNS.map(([, width], index) => {
              const cell = fit(values[index]!, width)
              if (index === 2 && entry.cycle.state === 'rolled_back') return <Text key={index} color={tint('red')}>{`${cell} `}</Text>
              if (index === 2 && entry.cycle.state === 'open') return <Text key={index} color={tint('green')}>{`${cell} `}</Text>
              return `${cell} `
            })}
          </Text>
        )
      })}
      <Box flexGrow={1} />
      {action}
      <Text dimColor wrap="truncate">
        {list.length} cycles{selected ? ` · selected ${selected.cycle.cycleId}` : ''}
      </Text>
      <Outcome message={message} />
    </Box>
  )
}

export const cyclesScreen: ScreenDefinition = {
  id: 'cycles',
  title: 'Cycles',
  keys: [
    ['←→', 'vault'],
    ['↑↓', 'select'],
    ['c', 'close'],
    ['s', 'settle'],
    ['b', 'roll back'],
    ['g', 'refresh'],
  ],
  help: 'A vault\'s cycles, newest first. Close, settle and roll back show their effect (intents, amount, accounts) and ask y/n; a roll back also asks for the vault id.',
  Component: CyclesScreen,
}
