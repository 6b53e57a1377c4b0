/**
 * Puts withdrawals in the approval queue of a running sandbox Kassa through its HTTP API only (as
 * an organization and an operator would), for the console's end-to-end test and its screenshots.
 */
export interface SeededOrg {
  orgId: string
  testKey: string
  accountId: string
  entryId: string
  /** Creates one withdrawal above the approval threshold; answers its id. */
  pendingWithdrawal(amount: string): Promise<string>
  call(method: string, path: string, body?: unknown): Promise<any>
}

const SUI_DESTINATION = `0x${'5a'.repeat(32)}`

async function send(baseUrl: string, token: string, method: string, path: string, body?: unknown): Promise<any> {
  const response = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const parsed = await response.json().catch(() => undefined)
  if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}: ${JSON.stringify(parsed)}`)
  return parsed
}

export async function seedOrg(baseUrl: string, operatorToken: string, name: string, destination = SUI_DESTINATION): Promise<SeededOrg> {
  const ops = (method: string, path: string, body?: unknown) => send(baseUrl, operatorToken, method, path, body)
  const org = await ops('POST', '/ops/v1/orgs', { name })
  const testKey = (org.keys as Array<{ type: string; key: string }>).find((key) => key.type === 'test')!.key
  await ops('PATCH', `/ops/v1/orgs/${org.id}/limits`, { rateLimitPerMinute: 1_000_000 })
  await ops('PUT', `/ops/v1/orgs/${org.id}/withdrawal-approval`, { asset: 'USDC', threshold: '500' })
  const call = (method: string, path: string, body?: unknown) => send(baseUrl, testKey, method, path, body)
  const account = await call('POST', '/v1/accounts', { externalId: `${name.toLowerCase().replace(/\W+/g, '-')}-treasury` })
  await call('POST', `/v1/sandbox/accounts/${account.id}/fund`, { asset: 'USDC', amount: '1000000' })
  const entry = await call('POST', `/v1/accounts/${account.id}/allowlist`, { network: 'sui', address: destination })
  await call('POST', '/v1/sandbox/clock/advance', { seconds: 24 * 3600 })
  return {
    orgId: org.id,
    testKey,
    accountId: account.id,
    entryId: entry.id,
    call,
    async pendingWithdrawal(amount) {
      const quote = await call('POST', '/v1/quotes', { kind: 'withdrawal', accountId: account.id, asset: 'USDC', amount })
      const withdrawal = await call('POST', '/v1/withdrawals', { accountId: account.id, allowlistEntryId: entry.id, quoteId: quote.id })
      return withdrawal.id
    },
  }
}
