import { plugin } from 'bun'

/**
 * postgres.js 3.4.9 can crash the whole process when a connection is lost in the middle of a
 * transaction (porsager/postgres#1066, #1154, #1208; the fixes, #1168 and #1209, are not released):
 * the transaction's ROLLBACK is written to the closed connection, the write is deferred with
 * `setImmediate`, and `nextWrite` then calls `socket.write` on the `null` socket. The TypeError is
 * thrown from a timer, so nothing can catch it; and catching it at process level is no cure, since
 * the connection keeps the unsent bytes and never connects cleanly again (every query on it hangs).
 *
 * This guard is #1209's: when the socket is gone, drop the unsent bytes and settle the queries
 * of that connection with `CONNECTION_CLOSED`, so callers see an ordinary connection error and the
 * pool reconnects. It is applied to the driver's source as it loads, so it must be installed
 * before anything imports `postgres` (the server's entry point does it first, then imports the app).
 * When the driver's code no longer has the expected shape (an upgrade), nothing is changed and a
 * warning says to check whether the upgrade carries the fix.
 */
const UNGUARDED = `  function nextWrite(fn) {
    const x = socket.write(chunk, fn)`

const GUARDED = `  function nextWrite(fn) {
    if (socket === null) {
      nextWriteTimer !== null && clearImmediate(nextWriteTimer)
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options))
      return false
    }
    const x = socket.write(chunk, fn)`

let installed = false

export function installPostgresDriverPatch(): void {
  if (installed) return
  installed = true
  plugin({
    name: 'kassa: postgres.js nextWrite guard',
    setup(build) {
      build.onLoad({ filter: /[\\/]postgres[\\/](cjs[\\/])?src[\\/]connection\.js$/ }, async ({ path }) => {
        const source = await Bun.file(path).text()
        if (!source.includes(UNGUARDED)) {
          console.warn(`kassa: ${path} no longer has the unguarded nextWrite; the crash guard for porsager/postgres#1208 was not applied (check the upgrade fixes it)`)
          return { contents: source, loader: 'js' }
        }
        return { contents: source.replace(UNGUARDED, GUARDED), loader: 'js' }
      })
    },
  })
}
