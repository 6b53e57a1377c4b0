// Scratch: what Bun's HTTP costs a server per request on this machine, closed loop, 128 connections.
import { KeepAliveClient } from './http-client.ts'
import { readFileSync } from 'node:fs'
const mode = process.argv[2] ?? 'server'
if (mode === 'server') {
  const kind = process.argv[3] ?? 'bun'
  const answer = JSON.stringify({ id: 'pay_01a2113608cd723a85567d72af086ef1', object: 'payment', state: 'authorized', amount: '1.00', asset: 'USDC', accountId: 'acct_01a211360851759a822561f30ded474f' })
  if (kind === 'bun') {
    Bun.serve({ port: 39123, async fetch(request) { const body = await request.json(); return new Response(answer, { status: 201, headers: { 'content-type': 'application/json' } }) } })
  } else {
    const { Elysia, t } = await import('elysia')
    new Elysia().post('/v1/payments/authorize', ({ body, set }) => { set.status = 201; return JSON.parse(answer) }, { body: t.Object({ accountId: t.String(), asset: t.String(), amount: t.String() }) }).listen(39123)
  }
} else {
  const server = Bun.spawn(['./node_modules/.bin/bun', 'bench/zz-bare.ts', 'server', mode], { stdout: 'inherit', stderr: 'inherit' })
  await Bun.sleep(1500)
  const client = new KeepAliveClient('http://127.0.0.1:39123')
  const req = client.prepare('POST', '/v1/payments/authorize', { 'content-type': 'application/json', authorization: 'Bearer sk_test_x' }, JSON.stringify({ accountId: 'acct_01a211360851759a822561f30ded474f', asset: 'USDC', amount: '1.00' }))
  const cpu = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' '); return (Number(f[11]) + Number(f[12])) * 10 }
  let stop = false; let n = 0
  const loop = async () => { while (!stop) { await client.send(req); n++ } }
  const loops = Array.from({ length: 128 }, loop)
  await Bun.sleep(2000)
  const c0 = cpu(server.pid); const n0 = n; const u0 = process.cpuUsage(); const t0 = performance.now()
  await Bun.sleep(6000)
  const c1 = cpu(server.pid); const n1 = n; const u1 = process.cpuUsage(); const t1 = performance.now()
  stop = true
  await Promise.all(loops)
  console.log(mode, 'req/s', Math.round(((n1 - n0) * 1000) / (t1 - t0)), 'server µs/req', (((c1 - c0) * 1000) / (n1 - n0)).toFixed(1), 'gen µs/req', (((u1.user + u1.system - u0.user - u0.system)) / (n1 - n0)).toFixed(1))
  server.kill(); client.close(); process.exit(0)
}
