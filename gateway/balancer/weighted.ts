/**
 * Weighted round robin, smooth, exactly as NGINX does it (`ngx_http_upstream_get_peer` in
 * nginx/nginx src/http/ngx_http_upstream_round_robin.c). Per pick, over the eligible endpoints:
 *
 *     current[i] += weight[i]; total += weight[i]      (every eligible endpoint)
 *     best = the first endpoint with the largest current
 *     current[best] -= total
 *
 * Why smooth: the plain rotation "a a a a a b c" sends a heavy server its whole share in a burst; the smooth one
 * interleaves it (weights 5/1/1 give a a b a c a a), so each server's requests are spread across the cycle.
 * The currents always sum to 0 after a pick and return to all-zero after W = Σweight picks, so every cycle of W
 * picks gives each endpoint exactly its weight. Envoy gets the same interleaving from an EDF scheduler (a heap,
 * O(log n) a pick); this scan is O(n) but reads one plain array and one Float64Array and allocates nothing, which
 * keeps it simple and exact (`bench/balancer-pick.ts` gives the cost; for hundreds of endpoints where that
 * matters, `p2c` is the O(1) strategy).
 *
 * Choices, and where they depart from NGINX:
 * - Weight 0 never takes traffic: such an endpoint is skipped and its current never moves.
 * - Excluded endpoints (already tried for this request) sit the pick out without gaining current, as NGINX skips
 *   the peers in its `tried` bitmap; the total then covers the others only, so the invariant above still holds.
 * - NGINX's `effective_weight` (cut on each failure, earned back by 1 a round) is left out: failing servers are the
 *   outlier detector's business here, and it takes them out of the candidate set rather than shaving weight.
 * - NGINX starts every worker at zero, so replicas started together walk the cycle in lock-step. Here each
 *   candidate set starts at a random phase of its cycle (the injected `random`, drawn once per set: we run
 *   `floor(random × min(W, 4096))` picks ahead when the set is first seen, a one-off cost of at most 4096 × n), as
 *   Envoy seeds its EDF scheduler "to desynchronize load balancers across a fleet". `random` → 0 gives NGINX's
 *   sequence from its start.
 *
 * State: per candidate array, a Float64Array of currents and a plain copy of the array (see `copy.ts` for why the
 * scan never reads the fleet's frozen array), in a WeakMap keyed by the array (see `types.ts`): a replaced array
 * starts a fresh cycle and the old state is collected.
 */
import { scanCopy } from './copy.ts'
import { checkedOptions, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const WEIGHTED = 'weighted'
/** Smooth weighted round robin takes no options. */
export const WEIGHTED_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze([])

/** The most picks run ahead to seed a set's phase; bounds the one-off cost for large total weights. */
const MAX_PHASE = 4096

/**
 * Smooth weighted round robin (NGINX's).
 *
 * @param options none are accepted; any key is a `GW_ERR_FLEET_INVALID`
 */
export function createWeighted (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  checkedOptions(WEIGHTED, WEIGHTED_OPTION_KEYS, options)
  const states = new WeakMap<readonly Endpoint[], Rotation>()

  function stateFor (candidates: readonly Endpoint[]): Rotation {
    let state = states.get(candidates)
    if (state === undefined) {
      // Allocated once per candidate set, not per pick.
      const list = scanCopy(candidates)
      const current = new Float64Array(list.length)
      let total = 0
      for (const endpoint of list) if (endpoint.weight > 0) total += endpoint.weight
      const ahead = Math.floor(deps.random() * Math.min(total, MAX_PHASE))
      for (let k = 0; k < ahead; k++) step(list, current, undefined)
      state = { list, current }
      states.set(candidates, state)
    }
    return state
  }

  return {
    name: WEIGHTED,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      const { list, current } = stateFor(candidates)
      const i = step(list, current, ctx.exclude)
      return i < 0 ? undefined : list[i]
    }
  }
}

/** One candidate set's rotation. */
interface Rotation {
  readonly list: readonly Endpoint[]
  readonly current: Float64Array
}

/** One NGINX selection round; returns the index picked, or -1 when no endpoint is eligible (nothing changes then). */
function step (candidates: readonly Endpoint[], current: Float64Array,
  exclude: ReadonlySet<Endpoint> | undefined): number {
  let total = 0
  let best = -1
  let bestCurrent = 0
  for (let i = 0; i < candidates.length; i++) {
    const endpoint = candidates[i]
    if (endpoint === undefined) continue
    const weight = endpoint.weight
    // `!(weight > 0)` also leaves out a NaN weight.
    if (!(weight > 0) || (exclude !== undefined && exclude.has(endpoint))) continue
    const c = (current[i] ?? 0) + weight
    current[i] = c
    total += weight
    // Strictly greater: the first maximum wins ties, as in NGINX, which is what makes 5/1/1 give a a b a c a a.
    if (best < 0 || c > bestCurrent) {
      best = i
      bestCurrent = c
    }
  }
  if (best >= 0) current[best] = bestCurrent - total
  return best
}
