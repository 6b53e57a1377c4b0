import { afterAll, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DELIVERY_PROCESS_NICE_DEFAULT as DELIVERY_PROCESS_NICE } from '../../server/config.ts'
import { verifyWebhook } from '../../server/modules/webhooks/verify.ts'
import { createTestDatabase, onPostgres, type TestDatabase } from '../support/db.ts'
import { eventually } from '../support/eventually.ts'
import { jsonClient, startServerProcess, type ServerProcess } from '../support/server-process.ts'
import { makeCertificate, startReceiver, type Certificate, type Receiver } from './receivers.ts'

const OPERATOR_TOKEN = 'delivery-process-operator-token-0123456789abcdef'

let database: TestDatabase | undefined
let certificate: Certificate | undefined
let receiver: Receiver | undefined
const servers: ServerProcess[] = []
const deliveryPids = new Set<number>()

afterAll(async () => {
  for (const server of servers) await server.kill9().catch(() => {})
  for (const pid of deliveryPids) if (alive(pid)) process.kill(pid, 'SIGKILL')
  receiver?.stop()
  await database?.drop()
  certificate?.remove()
})

/** `/proc/<pid>/stat`'s parent pid and niceness (fields 4 and 19; the name in field 2 may hold spaces). */
function statOf(pid: number): { ppid: number; nice: number } {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  return { ppid: Number(fields[1]), nice: Number(fields[16]) }
}

function alive(pid: number): boolean {
  if (!existsSync(`/proc/${pid}/stat`)) return false
  // A child that ended but is not yet reaped is a zombie: gone as far as work goes.
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8')
  return text.slice(text.lastIndexOf(')') + 2)[0] !== 'Z'
}

async function until(condition: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  await eventually(condition, { what, timeoutMs, intervalMs: 25 })
}

/** The delivery processes the server said it runs, newest last (the worker's own start line). */
function deliveryPidsIn(output: string): number[] {
  return [...output.matchAll(/kassa delivery: webhook delivery worker running \(pid (\d+)\)/g)].map((match) => Number(match[1]))
}

async function startServer(env: Record<string, string>): Promise<{ server: ServerProcess; deliveryPid: number }> {
  const server = await startServerProcess({ OPERATOR_TOKEN, ALLOW_LOOPBACK_WEBHOOKS: 'true', WEBHOOK_CA_FILE: certificate!.certFile, ...env })
  servers.push(server)
  await until(() => deliveryPidsIn(server.output()).length > 0, `the delivery process to start:\n${server.output()}`)
  const deliveryPid = deliveryPidsIn(server.output()).at(-1)!
  deliveryPids.add(deliveryPid)
  return { server, deliveryPid }
}

test.skipIf(!onPostgres)(
  'on Postgres a listening server delivers webhooks from a process of its own at the lowest priority, started again when it ends and ended with its server',
  async () => {
    database = await createTestDatabase()
    certificate = makeCertificate()
    receiver = startReceiver(certificate)
    const { server, deliveryPid } = await startServer({ DATABASE_URL: database.databaseUrl! })
    expect(server.output()).toContain(`kassa: webhook delivery: a process of its own at nice ${DELIVERY_PROCESS_NICE}`)
    expect(statOf(deliveryPid)).toEqual({ ppid: server.child.pid, nice: DELIVERY_PROCESS_NICE })

    const operator = jsonClient(() => server.baseUrl, OPERATOR_TOKEN)
    const org = (await operator('POST', '/ops/v1/orgs', { name: 'Delivery process' })).body
    const key = org.keys.find((entry: { type: string }) => entry.type === 'test').key as string
    const call = jsonClient(() => server.baseUrl, key)
    const endpoint = (await call('POST', '/v1/webhooks', { url: receiver.url, events: ['account.created'] })).body
    const account = async (externalId: string) => {
      const created = await call('POST', '/v1/accounts', { externalId })
      expect(created.status).toBe(201)
      return created.body.id as string
    }
    const deliveredFor = (accountId: string) => receiver!.received.filter((entry) => entry.event.data.accountId === accountId)

    // Delivered and signed with the endpoint's secret.
    const first = await account('process-1')
    await receiver.waitFor(() => deliveredFor(first).length === 1)
    const [delivery] = deliveredFor(first)
    expect(verifyWebhook(delivery!.rawBody, delivery!.signature, [endpoint.secret]).id).toBe(delivery!.event.id)

    // The delivery process is the one delivering: stopped, nothing arrives; let go, it does.
    process.kill(deliveryPid, 'SIGSTOP')
    const second = await account('process-2')
    await Bun.sleep(1_000)
    expect(deliveredFor(second)).toHaveLength(0)
    process.kill(deliveryPid, 'SIGCONT')
    await receiver.waitFor(() => deliveredFor(second).length === 1)

    // A resend from the server reaches the worker in the other process.
    const resent = await call('POST', `/v1/events/${delivery!.event.id}/resend`, { webhookId: endpoint.id })
    expect(resent.status).toBe(202)
    await receiver.waitFor(() => deliveredFor(first).length === 2)

    // Killed, it is started again by the server, and deliveries go on.
    process.kill(deliveryPid, 'SIGKILL')
    await until(() => deliveryPidsIn(server.output()).length === 2, `the delivery process to be started again:\n${server.output()}`)
    expect(server.output()).toContain('kassa: the webhook delivery process ended (SIGKILL); starting it again in 1 s')
    const restartedPid = deliveryPidsIn(server.output()).at(-1)!
    deliveryPids.add(restartedPid)
    expect(restartedPid).not.toBe(deliveryPid)
    expect(statOf(restartedPid)).toEqual({ ppid: server.child.pid, nice: DELIVERY_PROCESS_NICE })
    const third = await account('process-3')
    await receiver.waitFor(() => deliveredFor(third).length === 1)

    // The server killed outright: its delivery process sees its standard input close and ends.
    await server.kill9()
    await until(() => !alive(restartedPid), 'the delivery process to end with its server')
  },
  60_000,
)

test.skipIf(!onPostgres)('a server stopped with SIGTERM stops its delivery process first; WEBHOOK_DELIVERY_NICE sets its priority; WEBHOOK_DELIVERY_PROCESS=false keeps the worker in the server', async () => {
  database ??= await createTestDatabase()
  certificate ??= makeCertificate()
  receiver ??= startReceiver(certificate)
  const { server, deliveryPid } = await startServer({ DATABASE_URL: database.databaseUrl!, WEBHOOK_DELIVERY_NICE: '5' })
  expect(server.output()).toContain('kassa: webhook delivery: a process of its own at nice 5')
  expect(statOf(deliveryPid)).toEqual({ ppid: server.child.pid, nice: 5 })
  await server.stop()
  expect(server.output()).toContain('kassa delivery: SIGTERM, stopping')
  expect(alive(deliveryPid)).toBe(false)

  const inline = await startServerProcess({ OPERATOR_TOKEN, DATABASE_URL: database.databaseUrl!, WEBHOOK_DELIVERY_PROCESS: 'false' })
  servers.push(inline)
  await until(() => inline.output().includes('kassa: webhook delivery: in this process (WEBHOOK_DELIVERY_PROCESS=false)'), `the server's delivery line:
${inline.output()}`)
  await inline.stop()
  expect(deliveryPidsIn(inline.output())).toEqual([])
}, 60_000)

test('on the embedded database the worker runs in the server, as its start line says, and a delivery process is refused at start, naming the setting', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'kassa-delivery-embedded-'))
  try {
    const embedded = await startServerProcess({ OPERATOR_TOKEN, DATABASE_URL: '', DATA_DIR: dataDir })
    servers.push(embedded)
    await until(() => embedded.output().includes('kassa: webhook delivery: in this process (the embedded database is open in it alone)'), `the server's delivery line:\n${embedded.output()}`)
    await embedded.stop()
    expect(deliveryPidsIn(embedded.output())).toEqual([])
  } finally {
    rmSync(dataDir, { recursive: true, force: true })
  }
  const refused = Bun.spawnSync([process.execPath, 'server/main.ts'], {
    cwd: `${import.meta.dir}/../..`,
    env: { ...process.env, DATABASE_URL: '', PORT: '0', WEBHOOK_DELIVERY_PROCESS: 'true' },
  })
  expect(refused.exitCode).toBe(2)
  expect(refused.stderr.toString()).toContain('WEBHOOK_DELIVERY_PROCESS=true needs DATABASE_URL')
}, 60_000)
