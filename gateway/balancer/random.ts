/**
 * Random: each pick draws an endpoint at random with probability proportional to its weight (uniform when the
 * weights are equal, which is the default of 1 everywhere); weight 0 takes no traffic.
 *
 * Why weighted: every anchor that offers `random` weights it (NGINX's `random` "taking into account weights",
 * HAProxy's `random`, Envoy's random balancer), and a fleet file that sets weights means them for every strategy
 * that can honour them, so a user switching from `weighted` to `random` keeps the same long-run shares and only
 * loses the smooth interleaving. Random needs no state shared between picks (nothing to keep in sync across gateway
 * replicas, nothing to herd on), at the price of variance: over N picks an endpoint of share p gets
 * p·N ± √(p(1-p)N).
 *
 * Cost: cumulative weights are built once per candidate set (Float64Array); a pick is one draw of `random` and a
 * binary search, O(log n). With exclusions (only on a retry) the pick rescales over the remaining weight in one
 * O(n) pass, so an excluded endpoint's share goes to the others in proportion, and it still draws once.
 */
import { scanCopy } from './copy.ts'
import { checkedOptions, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const RANDOM = 'random'
/** Random takes no options. */
export const RANDOM_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze([])

/** Per candidate set: `cumulative[i]` is the sum of the positive weights of candidates 0..i. */
interface Cumulative {
  /** The plain copy of the set that picks read (see `copy.ts`). */
  readonly list: readonly Endpoint[]
  readonly cumulative: Float64Array
  readonly total: number
  /** The last candidate with weight > 0, for a draw that rounding put at `total`; -1 when there is none. */
  readonly last: number
}

/**
 * Weighted random.
 *
 * @param options none are accepted; any key is a `GW_ERR_FLEET_INVALID`
 */
export function createRandom (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  checkedOptions(RANDOM, RANDOM_OPTION_KEYS, options)
  const sets = new WeakMap<readonly Endpoint[], Cumulative>()

  function cumulativeFor (candidates: readonly Endpoint[]): Cumulative {
    let state = sets.get(candidates)
    if (state === undefined) {
      // Built once per candidate set, not per pick.
      const list = scanCopy(candidates)
      const cumulative = new Float64Array(list.length)
      let total = 0
      let last = -1
      for (let i = 0; i < list.length; i++) {
        const weight = list[i]?.weight ?? 0
        if (weight > 0) {
          total += weight
          last = i
        }
        cumulative[i] = total
      }
      state = { list, cumulative, total, last }
      sets.set(candidates, state)
    }
    return state
  }

  return {
    name: RANDOM,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      const { list, cumulative, total, last } = cumulativeFor(candidates)
      if (last < 0) return undefined
      const exclude = ctx.exclude
      if (exclude !== undefined) return pickExcluding(list, exclude, deps.random())
      const r = deps.random() * total
      // The first i with cumulative[i] > r: its weight is > 0, since cumulative[i - 1] <= r < cumulative[i].
      let lo = 0
      let hi = last
      while (lo < hi) {
        const mid = (lo + hi) >>> 1
        if ((cumulative[mid] ?? 0) > r) hi = mid
        else lo = mid + 1
      }
      return list[lo]
    }
  }
}

/** The weighted draw over the candidates not in `exclude`, from one uniform `u` in [0, 1). */
function pickExcluding (candidates: readonly Endpoint[], exclude: ReadonlySet<Endpoint>,
  u: number): Endpoint | undefined {
  // Index loops rather than for-of: no iterator object, even before the optimiser has seen this function.
  let available = 0
  for (let i = 0; i < candidates.length; i++) {
    const endpoint = candidates[i]
    if (endpoint !== undefined && endpoint.weight > 0 && !exclude.has(endpoint)) available += endpoint.weight
  }
  if (available <= 0) return undefined
  let r = u * available
  let chosen: Endpoint | undefined
  for (let i = 0; i < candidates.length; i++) {
    const endpoint = candidates[i]
    if (endpoint === undefined || !(endpoint.weight > 0) || exclude.has(endpoint)) continue
    chosen = endpoint
    r -= endpoint.weight
    if (r < 0) break
  }
  // When rounding leaves r at 0 after the last eligible endpoint, that endpoint is the pick.
  return chosen
}
