import { ed25519 } from '@noble/curves/ed25519.js'
import type { Config } from '../../server/config.ts'
import { INTENT_PERSONAL_MESSAGE, INTENT_TRANSACTION, signSui, suiAddressOfEd25519 } from '../../server/modules/sbt/sui.ts'
import { startTestApp, type TestApp } from '../support/app.ts'

/** A real Sui Ed25519 wallet: its address is derived from its key, and it signs as wallets do. */
export interface Wallet {
  secretKey: Uint8Array
  address: string
  signMessage(message: string): string
  signTransaction(bytes: Uint8Array): string
}

export function newWallet(): Wallet {
  const secretKey = ed25519.utils.randomSecretKey()
  return {
    secretKey,
    address: suiAddressOfEd25519(ed25519.getPublicKey(secretKey)),
    signMessage: (message) => signSui(secretKey, INTENT_PERSONAL_MESSAGE, new TextEncoder().encode(message)),
    signTransaction: (bytes) => signSui(secretKey, INTENT_TRANSACTION, bytes),
  }
}

/** A made-up but well-formed Sui address, for users that never sign anything. */
export function fakeAddress(seed: number): string {
  return `0x${seed.toString(16).padStart(64, '0')}`
}

export interface SbtResponse {
  status: number
  body: any
}

export interface SbtTestApp {
  app: TestApp
  token: string
  /** A request to the SBT listener's app (in process), with the service token unless `token` says otherwise. */
  sbt(method: string, path: string, options?: { body?: unknown; token?: string | null; rawBody?: string }): Promise<SbtResponse>
  /** A challenge signed by the wallet: the proof fields a credential or claim request carries. */
  proof(wallet: Wallet, inviteCode?: string): Promise<{ address: string; nonce: string; signature: string }>
  importDocument(document: unknown): Promise<SbtResponse>
  close(): Promise<void>
}

export async function startSbtApp(overrides: Partial<Config> = {}, runtimeOptions: Parameters<typeof startTestApp>[1] = {}): Promise<SbtTestApp> {
  const app = await startTestApp(overrides, runtimeOptions)
  const issued = await app.ops('POST', '/ops/v1/sbt/tokens', { environment: 'staging', label: 'tests' })
  if (issued.status !== 201) throw new Error(`issuing an SBT token failed: ${JSON.stringify(issued.body)}`)
  const token = issued.body.token as string
  const sbt: SbtTestApp['sbt'] = async (method, path, options = {}) => {
    const headers = new Headers()
    const chosen = options.token === undefined ? token : options.token
    if (chosen !== null) headers.set('authorization', chosen)
    let body: string | undefined = options.rawBody
    if (options.body !== undefined) {
      body = JSON.stringify(options.body)
      headers.set('content-type', 'application/json')
    } else if (body !== undefined) headers.set('content-type', 'application/json')
    const response = await app.kassa.sbt.app.handle(new Request(`http://sbt.test${path}`, { method, headers, body }))
    const text = await response.text()
    return { status: response.status, body: text === '' ? undefined : JSON.parse(text) }
  }
  return {
    app,
    token,
    sbt,
    async proof(wallet, inviteCode) {
      const challenge = await sbt('POST', '/auth/challenge', { body: { address: wallet.address, ...(inviteCode ? { inviteCode } : {}) } })
      if (challenge.status !== 200) throw new Error(`challenge failed: ${JSON.stringify(challenge.body)}`)
      return { address: wallet.address, nonce: challenge.body.data.nonce, signature: wallet.signMessage(challenge.body.data.message) }
    },
    importDocument: (document) => app.ops('POST', '/ops/v1/sbt/import', document),
    close: () => app.close(),
  }
}

/** Rows of a raw query on the test app's database. */
export async function query<T = Record<string, unknown>>(app: TestApp, text: string): Promise<T[]> {
  const { sql } = await import('drizzle-orm')
  const result = await app.kassa.runtime.db.execute(sql.raw(text))
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[]
}
