/**
 * The panic threshold (Envoy's `healthy_panic_threshold`, default 50 %; `gateway-anchors.md` (b)6): when fewer
 * than that share of a model's endpoints are usable (healthy and not ejected), balance over all of them instead of
 * the few that are left.
 *
 * Why: health checks and outlier detection are heuristics. When they condemn most of a fleet at once, the cause is
 * more often the checks (a slow health endpoint, a network blip, a bad deploy of the checker) or a brown-out that
 * the survivors cannot absorb anyway than a fleet that is really mostly dead. Piling the whole load onto the
 * remaining few would take them down too (a cascade); spreading it over everyone lets the requests that can
 * succeed succeed. 0 % turns panic off (with no usable endpoint there is then nothing to route to: "no healthy
 * upstream"); 100 % panics as soon as one endpoint is unusable.
 *
 * Where it sits: the fleet (which knows health) calls {@link usableOrAll} when an endpoint's health or ejection
 * changes, never per request, and hands balancers the result as their candidate array. Draining endpoints should
 * not be in `all` at all: Envoy leaves them out of the panic arithmetic, since an operator asked for them to go.
 */
import { createError } from '../../common/errors.ts'
import { type Endpoint } from './types.ts'

/** Envoy's default `healthy_panic_threshold`. */
export const DEFAULT_PANIC_THRESHOLD_PERCENT = 50

const NONE: readonly Endpoint[] = Object.freeze([])

/** Per `all`, the usable subset returned last, so an unchanged subset keeps its identity. */
const lastUsable = new WeakMap<readonly Endpoint[], readonly Endpoint[]>()

/**
 * What is wrong with `value` as a panic threshold, for the config loader; `undefined` when it is fine.
 * Valid: a number from 0 to 100 (a percentage; 0 disables panic).
 */
export function panicThresholdProblem (value: unknown): string | undefined {
  if (typeof value === 'number' && value >= 0 && value <= 100) return undefined
  const got = typeof value === 'number' ? String(value) : typeof value
  return `the panic threshold must be a percentage from 0 to 100 (0 turns panic off), got ${got}`
}

/**
 * The endpoints to balance over: the usable ones, or all of them when fewer than `thresholdPercent` % are usable
 * (`usable × 100 < thresholdPercent × all.length`).
 *
 * Identity: in panic the result is `all` itself. Otherwise it is a frozen array that stays the same object for as
 * long as the usable subset of the same `all` array is the same (same endpoints, same order), however often this is
 * called, because balancers keep their per-set state (rotation, ring) keyed on the array. The cache is a WeakMap
 * keyed on `all`, so a replaced `all` (a fleet update) starts afresh and the old entry is collected. Cost: O(n)
 * and `isUsable` once per endpoint a call; allocation only when the subset changed.
 *
 * @param all every endpoint of the model (and version) that could take traffic, in fleet order; not modified
 * @param isUsable whether an endpoint is healthy and not ejected; called once per endpoint, in order
 * @param thresholdPercent from 0 to 100; default {@link DEFAULT_PANIC_THRESHOLD_PERCENT}
 * @throws FlotillaError `GW_ERR_FLEET_INVALID` when `thresholdPercent` is out of range
 *   (see {@link panicThresholdProblem})
 */
export function usableOrAll (all: readonly Endpoint[], isUsable: (endpoint: Endpoint) => boolean,
  thresholdPercent: number = DEFAULT_PANIC_THRESHOLD_PERCENT): readonly Endpoint[] {
  const problem = panicThresholdProblem(thresholdPercent)
  if (problem !== undefined) throw createError('GW_ERR_FLEET_INVALID', problem)
  const cached = lastUsable.get(all)
  // Stays undefined while the usable endpoints seen so far match the cached array, position by position.
  let changed: Endpoint[] | undefined
  let count = 0
  for (let i = 0; i < all.length; i++) {
    const endpoint = all[i]
    if (endpoint === undefined || !isUsable(endpoint)) continue
    if (changed === undefined && (cached === undefined || cached[count] !== endpoint)) {
      changed = cached === undefined ? [] : cached.slice(0, count)
    }
    changed?.push(endpoint)
    count++
  }
  let usable: readonly Endpoint[]
  if (changed !== undefined) usable = Object.freeze(changed)
  else if (cached === undefined) usable = NONE
  else if (count !== cached.length) usable = Object.freeze(cached.slice(0, count))
  else usable = cached
  if (usable !== cached) lastUsable.set(all, usable)
  return count * 100 < thresholdPercent * all.length ? all : usable
}
