import { render } from 'ink'
import { OperatorApi } from './api.ts'
import { App } from './app.tsx'
import { HELP, parseArgs } from './args.ts'
import { installMemoryProbe } from './memory-probe.ts'

/**
 * `bun run console`: checks the address and the token once, then runs the console. Anything that
 * stops it before it starts is one line on stderr and exit code 1 (2 for a bad command line).
 */
async function main(): Promise<number> {
  const parsed = parseArgs(process.argv.slice(2), process.env)
  if (parsed.kind === 'help') {
    process.stdout.write(HELP)
    return 0
  }
  if (parsed.kind === 'error') {
    process.stderr.write(`kassa console: ${parsed.message}\n`)
    return 2
  }
  const { options } = parsed
  const api = new OperatorApi(options.url, options.token)
  const connected = await api.connect()
  if (!connected.ok) {
    const why =
      connected.code === 'unreachable'
        ? `cannot reach Kassa at ${options.url}`
        : connected.code === 'authentication_error'
          ? `Kassa at ${options.url} refused the operator token`
          : `Kassa at ${options.url} answered ${connected.code}: ${connected.message}`
    process.stderr.write(`kassa console: ${why}\n`)
    return 1
  }
  if (!process.stdin.isTTY) {
    process.stderr.write('kassa console: needs a terminal (stdin is not a TTY)\n')
    return 1
  }
  installMemoryProbe(process.env)
  const instance = render(
    <App api={api} environment={connected.value.environment} color={options.color} operatorName={options.operator} refreshMs={options.refreshMs} />,
    { exitOnCtrlC: true },
  )
  await instance.waitUntilExit()
  return 0
}

process.exitCode = await main().catch((error: unknown) => {
  process.stderr.write(`kassa console: ${(error as Error).message}\n`)
  return 1
})
process.exit(process.exitCode)
