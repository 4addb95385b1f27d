/**
 * Checking {@link BalancerOptions}: what the config loader calls once per fleet file (through
 * `validateBalancerOptions` in `registry.ts`) and what every factory calls again on what it is handed, so that a
 * strategy never meets an option it cannot use. Nothing here runs per pick.
 */
import { createError } from '../../common/errors.ts'
import { type BalancerOptions } from './types.ts'

/** `consistent_hash`: the bound of Google's "Consistent Hashing with Bounded Loads" as SMG and HAProxy advise it. */
export const DEFAULT_HASH_BALANCE_FACTOR = 1.25
/** `least_queue`: one HAProxy `inter` (2 s); a worker that answers nothing for that long has an unknown queue. */
export const DEFAULT_STALE_AFTER_MS = 2000
/** `p2c`: Envoy's `choice_count` default. */
export const DEFAULT_CHOICES = 2

/** The name of one option. */
export type BalancerOptionKey = keyof BalancerOptions

/** Every option some strategy takes, in the order messages list them. */
export const BALANCER_OPTION_KEYS: readonly BalancerOptionKey[] =
  Object.freeze(['hashBalanceFactor', 'staleAfterMs', 'choices'])

/** Per option: what a valid value is, as a message fragment, and the test. */
const RULES: Readonly<Record<BalancerOptionKey, { readonly expected: string, readonly ok: (v: number) => boolean }>> = {
  hashBalanceFactor: {
    expected: 'a number >= 1, or 0 to turn bounded load off',
    ok: (v) => v === 0 || (v >= 1 && v < Infinity)
  },
  staleAfterMs: { expected: 'a number of milliseconds >= 0', ok: (v) => v >= 0 },
  choices: { expected: 'an integer >= 2', ok: (v) => Number.isSafeInteger(v) && v >= 2 }
}

/**
 * The problems with `options` for `strategy`, one message each (empty when they are fine). `undefined` and `{}`
 * are always fine; a key set to `undefined` counts as left out.
 *
 * @param strategy the strategy's registered name, for the messages
 * @param accepted the options that strategy takes
 * @param options as parsed from configuration, so of any shape
 */
export function optionProblems (strategy: string, accepted: readonly BalancerOptionKey[], options: unknown): string[] {
  if (options === undefined) return []
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    return [`options for balancing strategy '${strategy}' must be a mapping, got ${describe(options)}`]
  }
  const allowed = accepted.length === 0 ? 'it takes none' : `it takes: ${accepted.join(', ')}`
  const problems: string[] = []
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue
    if (!(accepted as readonly string[]).includes(key)) {
      problems.push((BALANCER_OPTION_KEYS as readonly string[]).includes(key)
        ? `option '${key}' does not apply to balancing strategy '${strategy}' (${allowed})`
        : `unknown option '${key}' for balancing strategy '${strategy}' (${allowed})`)
      continue
    }
    const rule = RULES[key as BalancerOptionKey]
    if (typeof value !== 'number' || Number.isNaN(value) || !rule.ok(value)) {
      problems.push(
        `option '${key}' of balancing strategy '${strategy}' must be ${rule.expected}, got ${describe(value)}`)
    }
  }
  return problems
}

/**
 * `options` itself when {@link optionProblems} finds nothing wrong (or `{}` for `undefined`).
 *
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` listing every problem, separated by `; `
 */
export function checkedOptions (strategy: string, accepted: readonly BalancerOptionKey[],
  options: BalancerOptions | undefined): BalancerOptions {
  const problems = optionProblems(strategy, accepted, options)
  if (problems.length > 0) throw createError('GW_ERR_FLEET_INVALID', problems.join('; '))
  return options ?? {}
}

function describe (value: unknown): string {
  if (typeof value === 'string') return `'${value}' (a string)`
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value)
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'a list'
  // What is left: an object, a function, a symbol or undefined; YAML can only give the first.
  return typeof value === 'object' ? 'a mapping' : `a ${typeof value}`
}
