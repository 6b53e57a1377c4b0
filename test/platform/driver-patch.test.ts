import { describe, expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'

/**
 * postgres.js 3.4.9 crashes the process when a connection is lost in the middle of a transaction
 * (porsager/postgres#1066, #1154, #1208): `nextWrite` writes to a socket that is gone. The guard of
 * the upstream fix (#1209) is applied to the installed driver by `patch-package` on install
 * (`patches/postgres+3.4.9.patch`), so the server, the delivery process and these tests all load
 * the same, guarded driver. Remove the patch once a release carries the fix.
 */
const driverFolder = dirname(require.resolve('postgres/package.json'))
const GUARD = `  function nextWrite(fn) {
    if (socket === null) {`

describe('the postgres.js driver as installed', () => {
  for (const file of ['src/connection.js', 'cjs/src/connection.js']) {
    test(`${file} carries the guard against writing to a lost connection`, () => {
      expect(readFileSync(join(driverFolder, file), 'utf8')).toContain(GUARD)
    })
  }

  test('the driver this process loaded is the guarded one', async () => {
    const loaded = Bun.resolveSync('postgres', import.meta.dir)
    expect(readFileSync(join(dirname(loaded), 'connection.js'), 'utf8')).toContain(GUARD)
  })
})
