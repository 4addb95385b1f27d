import { type ErrorCode, isFlotillaError } from '../../common/errors.ts'

/** The assertions {@link throwsCoded} uses; satisfied by the root `t` and by every subtest's `t`. */
export interface Asserts {
  equal: (found: unknown, wanted: unknown, message: string) => boolean
  fail: (message: string) => boolean
}

/**
 * Asserts that `fn` throws a coded error with exactly this code and message (and, when given, HTTP status).
 * Exact messages are the contract: clients match on them.
 */
export function throwsCoded (t: Asserts, fn: () => unknown, expected: { code: ErrorCode, message: string, status?: number },
  what = expected.message): void {
  let caught: unknown
  try {
    fn()
  } catch (err) {
    caught = err
  }
  if (!isFlotillaError(caught)) {
    t.fail(`${what}: expected a coded error, got ${String(caught)}`)
    return
  }
  t.equal(caught.code, expected.code, `${what}: code`)
  if (expected.status !== undefined) t.equal(caught.statusCode, expected.status, `${what}: status`)
  t.equal(caught.message, expected.message, `${what}: message`)
}
