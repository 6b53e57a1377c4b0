/**
 * The console's only way to Kassa: the operator API over HTTP. Every call resolves to a result or
 * to an `ApiFailure` with a message fit for one line; nothing here throws at the screens.
 */

export interface ApiFailure {
  ok: false
  /** The API's error code, or `unreachable` when no answer came. */
  code: string
  message: string
  status?: number
}
export type ApiResult<T> = { ok: true; value: T; replayed: boolean } | ApiFailure

export interface QueueItem {
  id: string
  orgId: string
  orgName: string
  accountId: string
  amount: string
  asset: string
  network: string
  destination: string
  screening: { outcome: 'pass' | 'reject' | 'unavailable'; reason: string | null }
  createdAt: string
  ageSeconds: number
}

export interface WithdrawalDetail {
  orgId: string
  orgName: string
  withdrawal: { id: string; state: string; accountId: string; amount: string; asset: string; network: string; address: string; totalDebited: string; fees: { network: string; service: string }; createdAt: string; failureReason: string | null }
  quote: { id: string; state: string; amount: string; networkFee: string; serviceFee: string; totalDebited: string; createdAt: string; expiresAt: string } | null
  screening: QueueItem['screening']
  actions: Array<{ id: string; operator: string; action: string; outcome: string; errorCode: string | null; createdAt: string }>
}

export interface KassaEvent {
  id: string
  orgId: string | null
  type: string
  created: string
  data: Record<string, unknown>
}

export interface VaultInfo {
  vaultId: string
  name: string
  asset: string
  state: 'active' | 'paused'
  instantBuffer: string
  terms: { payoutMode: string; depositCycleSeconds: number | null; redeemCycleSeconds: number | null }
}

export interface VaultPriceInfo {
  sharePrice: string
  apy: string | null
  asOf: string
  stale: boolean
}

export interface CycleInfo {
  cycleId: string
  vaultId: string
  cycleKind: 'deposit' | 'redeem'
  settlementCycle: number
  state: 'open' | 'closed' | 'settled' | 'rolled_back'
  openedAt: string
  closedAt: string | null
  finishedAt: string | null
  sharePrice: string | null
  totalAmount: string | null
  totalShares: string | null
  fee: string | null
  intents: number | null
}

export interface CycleIntentsInfo {
  cycle: CycleInfo
  pending: { intents: number; accounts: number; amount: string; fee: string; shares: string }
  intents: Array<{ id: string; orgId: string; accountId: string; externalId: string; state: string; reason: string | null; amount: string | null; fee: string; shares: string | null }>
  hasMore: boolean
}

export type CycleAction = 'close' | 'settle' | 'rollback'

const REQUEST_TIMEOUT_MS = 10_000

export class OperatorApi {
  constructor(
    readonly baseUrl: string,
    private readonly token: string,
  ) {}

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { authorization: `Bearer ${this.token}`, ...extra }
  }

  async call<T>(method: string, path: string, options: { body?: unknown; idempotencyKey?: string } = {}): Promise<ApiResult<T>> {
    const headers = this.headers()
    if (options.body !== undefined) headers['content-type'] = 'application/json'
    if (options.idempotencyKey !== undefined) headers['idempotency-key'] = options.idempotencyKey
    let response: Response
    try {
      response = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      })
    } catch (error) {
      return { ok: false, code: 'unreachable', message: `${this.baseUrl} did not answer (${(error as Error).message})` }
    }
    const text = await response.text().catch(() => '')
    let body: any
    try {
      body = text === '' ? undefined : JSON.parse(text)
    } catch {
      body = undefined
    }
    if (!response.ok) {
      const error = body?.error
      const field = error?.field ? ` (${error.field})` : ''
      return { ok: false, status: response.status, code: error?.code ?? `http_${response.status}`, message: `${error?.message ?? response.statusText}${field}` }
    }
    return { ok: true, value: body as T, replayed: response.headers.get('idempotent-replayed') === 'true' }
  }

  /** Checks the address and the token once, for the start: answers the server's environment or the failure. */
  async connect(): Promise<ApiResult<{ environment: string }>> {
    const health = await this.call<{ environment: string }>('GET', '/health')
    if (!health.ok) return health
    const probe = await this.call<unknown>('GET', '/ops/v1/withdrawal-approvals?limit=1')
    if (!probe.ok) return probe
    return health
  }

  approvalQueue() {
    return this.call<{ withdrawals: QueueItem[]; hasMore: boolean }>('GET', '/ops/v1/withdrawal-approvals')
  }

  withdrawal(id: string) {
    return this.call<WithdrawalDetail>('GET', `/ops/v1/withdrawals/${encodeURIComponent(id)}`)
  }

  approve(id: string, operator: string, idempotencyKey: string) {
    return this.call<{ id: string; state: string }>('POST', `/ops/v1/withdrawals/${encodeURIComponent(id)}/approve`, { body: { operator }, idempotencyKey })
  }

  reject(id: string, operator: string, reason: string, idempotencyKey: string) {
    return this.call<{ id: string; state: string }>('POST', `/ops/v1/withdrawals/${encodeURIComponent(id)}/reject`, { body: { operator, reason }, idempotencyKey })
  }

  vaults() {
    return this.call<{ vaults: VaultInfo[] }>('GET', '/ops/v1/vaults')
  }

  vaultPrice(vaultId: string) {
    return this.call<VaultPriceInfo>('GET', `/ops/v1/vaults/${encodeURIComponent(vaultId)}/price`)
  }

  /** `operator` is recorded in the audit trail ("operator" on the server when left empty). */
  setVaultState(vaultId: string, action: 'pause' | 'unpause', idempotencyKey: string, operator = '') {
    return this.call<VaultInfo>('POST', `/ops/v1/vaults/${encodeURIComponent(vaultId)}/${action}`, { idempotencyKey, ...(operator ? { body: { operator } } : {}) })
  }

  cycles(vaultId: string) {
    return this.call<{ cycles: CycleInfo[] }>('GET', `/ops/v1/vaults/${encodeURIComponent(vaultId)}/cycles`)
  }

  cycleIntents(cycleId: string) {
    return this.call<CycleIntentsInfo>('GET', `/ops/v1/vault-cycles/${encodeURIComponent(cycleId)}/intents`)
  }

  cycleAction(cycleId: string, action: CycleAction, idempotencyKey: string, operator = '') {
    return this.call<CycleInfo>('POST', `/ops/v1/vault-cycles/${encodeURIComponent(cycleId)}/${action}`, { idempotencyKey, ...(operator ? { body: { operator } } : {}) })
  }
}

/** A fresh key for one action: retrying that action (after a timeout) sends the same key. */
export function newIdempotencyKey(action: string): string {
  return `console-${action}-${crypto.randomUUID()}`
}
