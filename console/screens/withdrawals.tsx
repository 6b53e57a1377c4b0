import { Box, Text, useInput } from 'ink'
import { useCallback, useRef, useState } from 'react'
import { newIdempotencyKey, type QueueItem, type WithdrawalDetail } from '../api.ts'
import { age, answerConfirm, Confirm, fit, Outcome, Prompt, shortId, useRefreshing } from '../components.tsx'
import { useConsole, useTint } from '../context.tsx'
import type { ScreenDefinition, ScreenProps } from './types.ts'

type Message = { text: string; tone: 'ok' | 'error' | 'info' } | null

/** An approval or a rejection in progress: its key is made once, so a retry of the same action is the same request. */
interface Flow {
  kind: 'approve' | 'reject'
  item: QueueItem
  step: 'name' | 'reason' | 'confirm' | 'sending'
  operator: string
  reason: string
  idempotencyKey: string
}

const COLUMNS = [
  ['Organization', 13],
  ['Account', 12],
  ['Amount', 13],
  ['Asset', 5],
  ['Net', 4],
  ['Destination', 14],
  ['Screen', 6],
  ['Age', 4],
] as const

function row(item: QueueItem): string[] {
  return [
    item.orgName,
    shortId(item.accountId, 12),
    item.amount.replace(/\.?0+$/, ''),
    item.asset,
    item.network,
    shortId(item.destination, 14),
    item.screening.outcome,
    age(item.ageSeconds),
  ]
}

function fromDetail(detail: WithdrawalDetail): QueueItem {
  const w = detail.withdrawal
  return { id: w.id, orgId: detail.orgId, orgName: detail.orgName, accountId: w.accountId, amount: w.amount, asset: w.asset, network: w.network, destination: w.address, screening: detail.screening, createdAt: w.createdAt, ageSeconds: 0 }
}

function describe(item: QueueItem): string {
  return `${item.amount.replace(/\.?0+$/, '')} ${item.asset} on ${item.network} to ${shortId(item.destination, 20)} for ${item.orgName} (${item.id})`
}

function WithdrawalsScreen({ height, active, setCapturing }: ScreenProps) {
  const { api, report, refreshMs, operatorName, setOperatorName } = useConsole()
  const tint = useTint()
  const [items, setItems] = useState<QueueItem[] | null>(null)
  const [selectedId, setSelectedId] = useState<string | null>(null)
  const [detail, setDetail] = useState<WithdrawalDetail | null>(null)
  const [flow, setFlow] = useState<Flow | null>(null)
  const [message, setMessage] = useState<Message>(null)
  const mounted = useRef(true)

  const refresh = useCallback(async () => {
    const answer = await api.approvalQueue()
    report(answer.ok ? { ok: true } : answer)
    if (!mounted.current) return
    if (answer.ok) setItems(answer.value.withdrawals)
  }, [api, report])

  useRefreshing(refresh, refreshMs, mounted)

  setCapturing(flow !== null && flow.step !== 'sending')

  const list = items ?? []
  const selectedIndex = Math.max(0, list.findIndex((item) => item.id === selectedId))
  const selected = list[selectedIndex]

  const openDetail = async (item: QueueItem) => {
    const answer = await api.withdrawal(item.id)
    report(answer.ok ? { ok: true } : answer)
    if (answer.ok) setDetail(answer.value)
    else setMessage({ text: `${answer.code}: ${answer.message}`, tone: 'error' })
  }

  const start = (kind: Flow['kind'], item: QueueItem | undefined) => {
    if (item === undefined) return
    setMessage(null)
    setFlow({ kind, item, step: 'name', operator: operatorName, reason: '', idempotencyKey: newIdempotencyKey(kind) })
  }

  const send = async (current: Flow) => {
    setFlow({ ...current, step: 'sending' })
    const answer =
      current.kind === 'approve'
        ? await api.approve(current.item.id, current.operator, current.idempotencyKey)
        : await api.reject(current.item.id, current.operator, current.reason, current.idempotencyKey)
    report(answer.ok ? { ok: true } : answer)
    if (!mounted.current) return
    setFlow(null)
    if (answer.ok) {
      const verb = current.kind === 'approve' ? 'Approved' : 'Rejected'
      setMessage({ text: `${verb} ${current.item.id} as ${current.operator}: now ${answer.value.state}`, tone: 'ok' })
      setDetail(null)
      // It left the queue: shown so at once, before the refresh below confirms it.
      setItems((previous) => previous?.filter((item) => item.id !== current.item.id) ?? previous)
    } else {
      setMessage({ text: `${current.kind} ${shortId(current.item.id, 16)} refused: ${answer.code}: ${answer.message}`, tone: 'error' })
    }
    await refresh()
  }

  // Always subscribed (a handler switched on and off by state can miss the key pressed right after
  // a change); it reads the state it needs instead.
  useInput((input, key) => {
    if (!active) return
    if (flow !== null) {
      if (flow.step === 'confirm') answerConfirm(input, key, { yes: () => void send(flow), no: () => setFlow(null) })
      return
    }
    if (detail !== null) {
      if (key.escape || key.backspace || key.leftArrow) setDetail(null)
      else if (input === 'a') start('approve', fromDetail(detail))
      else if (input === 'r') start('reject', fromDetail(detail))
      return
    }
    if (key.downArrow || input === 'j') setSelectedId(list[Math.min(list.length - 1, selectedIndex + 1)]?.id ?? null)
    else if (key.upArrow || input === 'k') setSelectedId(list[Math.max(0, selectedIndex - 1)]?.id ?? null)
    else if (key.return && selected) void openDetail(selected)
    else if (input === 'a') start('approve', selected)
    else if (input === 'r') start('reject', selected)
    else if (input === 'g') void refresh()
  })

  let action = null
  if (flow !== null) {
    const verb = flow.kind === 'approve' ? 'Approve' : 'Reject'
    if (flow.step === 'name')
      action = (
        <Prompt
          key="name"
          label="Operator name:"
          defaultValue={flow.operator}
          onCancel={() => setFlow(null)}
          onSubmit={(name) => {
            if (name === '') return
            setOperatorName(name)
            setFlow({ ...flow, operator: name, step: flow.kind === 'reject' ? 'reason' : 'confirm' })
          }}
        />
      )
    else if (flow.step === 'reason')
      action = <Prompt key="reason" label="Reason:" onCancel={() => setFlow(null)} onSubmit={(reason) => reason !== '' && setFlow({ ...flow, reason, step: 'confirm' })} />
    else if (flow.step === 'confirm')
      action = (
        <Confirm question={`${verb} ${describe(flow.item)} as ${flow.operator}${flow.kind === 'reject' ? `, reason "${flow.reason}"` : ''}?`} />
      )
    else action = <Text>{verb === 'Approve' ? 'Approving' : 'Rejecting'} {flow.item.id}…</Text>
  }

  if (detail !== null) {
    const w = detail.withdrawal
    const q = detail.quote
    return (
      <Box flexDirection="column" height={height}>
        <Text bold>
          Withdrawal {w.id} <Text color={tint('yellow')}>{w.state}</Text>
        </Text>
        <Text wrap="truncate">Organization {detail.orgName} ({detail.orgId})</Text>
        <Text wrap="truncate">Account      {w.accountId}</Text>
        <Text wrap="truncate">Destination  {w.address} ({w.network})</Text>
        <Text wrap="truncate">
          Screening    {detail.screening.outcome}
          {detail.screening.reason ? `: ${detail.screening.reason}` : ''}
        </Text>
        <Text bold>Quote {q ? `${q.id} (${q.state})` : 'not found'}</Text>
        {q && (
          <>
            <Text>  amount        {q.amount} {w.asset}</Text>
            <Text>  network fee   {q.networkFee}</Text>
            <Text>  service fee   {q.serviceFee}</Text>
            <Text>  total debited {q.totalDebited}</Text>
            <Text wrap="truncate">  quoted {q.createdAt}, expires {q.expiresAt}</Text>
          </>
        )}
        <Text bold>Operator actions</Text>
        {detail.actions.length === 0 ? <Text dimColor>  none</Text> : null}
        {detail.actions.slice(0, 3).map((entry) => (
          <Text key={entry.id} wrap="truncate">
            {'  '}
            {entry.createdAt} {entry.operator} {entry.action} {entry.outcome}
            {entry.errorCode ? ` (${entry.errorCode})` : ''}
          </Text>
        ))}
        {action}
        <Outcome message={message} />
      </Box>
    )
  }

  const reserved = 3 + (flow === null ? 0 : flow.step === 'confirm' ? 3 : 2)
  const visible = Math.max(1, height - reserved)
  const first = Math.min(Math.max(0, selectedIndex - visible + 1), Math.max(0, list.length - visible))
  return (
    <Box flexDirection="column" height={height}>
      <Text bold wrap="truncate">
        {COLUMNS.map(([name, width]) => fit(name, width)).join(' ')}
      </Text>
      {items === null ? <Text dimColor>Loading the approval queue…</Text> : null}
      {items !== null && list.length === 0 ? <Text dimColor>No withdrawal is waiting for approval.</Text> : null}
      {list.slice(first, first + visible).map((item) => {
        const cells = row(item)
        const isSelected = item.id === selected?.id
        return (
          <Text key={item.id} inverse={isSelected} wrap="truncate">
            {COLUMNS.map(([, width], index) => {
              const cell = fit(cells[index]!, width)
              if (index === 6 && item.screening.outcome !== 'pass') return <Text key={index} color={tint('red')}>{`${cell} `}</Text>
              return `${cell} `
            })}
          </Text>
        )
      })}
      <Box flexGrow={1} />
      {action}
      <Text dimColor wrap="truncate">
        {list.length} waiting{selected ? ` · selected ${selected.id}` : ''}
      </Text>
      <Outcome message={message} />
    </Box>
  )
}

export const withdrawalsScreen: ScreenDefinition = {
  id: 'withdrawals',
  title: 'Withdrawals',
  keys: [
    ['↑↓', 'select'],
    ['⏎', 'detail'],
    ['a', 'approve'],
    ['r', 'reject'],
    ['g', 'refresh'],
    ['esc', 'back'],
  ],
  help: 'Withdrawals waiting for a second approval, across organizations, newest first; the list refreshes itself. Approve asks for your name (recorded in the audit trail) and a confirmation; reject asks for your name, a reason and a confirmation.',
  Component: WithdrawalsScreen,
}
