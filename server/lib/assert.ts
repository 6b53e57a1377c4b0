/**
 * Programmer errors are not expected failures: an assertion that fails means the code is wrong, so
 * it crashes the request loudly (it surfaces as `internal`) instead of pretending to be a business rule.
 */
export class AssertionError extends Error {
  override name = 'AssertionError'
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(message)
}

export function assertNever(value: never, message = 'unexpected value'): never {
  throw new AssertionError(`${message}: ${String(value)}`)
}
