/**
 * Least expected latency: the endpoint where a new request should finish soonest, estimated as
 * `(inFlight + 1) × recent latency / weight`, ties broken round-robin. This is Finagle's and Linkerd's "peak EWMA"
 * cost (without the peak), and what inference fleets need that HAProxy's `leastconn` and Envoy's least-request lack:
 * they count requests, so a server three times slower (an older GPU, a neighbour on the same card) gets the same
 * concurrency as the fast ones, and every request it takes waits three times as long. Weighting the count by how
 * long requests there actually take sends it a third of the work instead, which is what its speed allows.
 *
 * The latency is the endpoint's `latencyMs`, the forwarder's moving average over its last ~10 attempts (all
 * models, queueing in the worker included, which is the point: a worker whose queue grows looks slower at once).
 * An endpoint with no sample yet costs 0, so it gets the next request and a first measurement; ejection and health
 * checks, not this strategy, keep broken servers out. Weight 0 takes no traffic.
 *
 * The scan is O(n) per pick like `least_connections`, and allocates nothing.
 */
import { scanCursorFor, type ScanCursor } from './least-load.ts'
import { checkedOptions, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const LEAST_LATENCY = 'least_latency'
/** Least latency takes no options. */
export const LEAST_LATENCY_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze([])

/** The expected cost of one more request on `endpoint`, before dividing by weight. */
function costOf (endpoint: Endpoint): number {
  const latency = endpoint.latencyMs
  // NaN (no sample) and anything not positive count as free: measure it.
  return latency > 0 ? (endpoint.inFlight + 1) * latency : 0
}

/**
 * The eligible endpoint with the least `cost / weight`, the first such from the cursor on; moves the cursor past it.
 */
function pickLeastCost (cursor: ScanCursor, exclude: ReadonlySet<Endpoint> | undefined): Endpoint | undefined {
  const list = cursor.list
  const n = list.length
  let best: Endpoint | undefined
  let bestIndex = -1
  let bestCost = 0
  let bestWeight = 0
  const start = cursor.next
  for (let k = 0; k < n; k++) {
    const i = start + k < n ? start + k : start + k - n
    const endpoint = list[i]
    if (endpoint === undefined) continue
    const weight = endpoint.weight
    if (!(weight > 0) || (exclude !== undefined && exclude.has(endpoint))) continue
    const cost = costOf(endpoint)
    // Cross-multiplied, as least-load.ts does: no division per endpoint.
    if (best === undefined || cost * bestWeight < bestCost * weight) {
      best = endpoint
      bestIndex = i
      bestCost = cost
      bestWeight = weight
    }
  }
  if (best !== undefined) cursor.next = bestIndex + 1 < n ? bestIndex + 1 : 0
  return best
}

/**
 * Least expected latency per unit of weight; ties rotate.
 *
 * @param options none are accepted; any key is a `GW_ERR_FLEET_INVALID`
 */
export function createLeastLatency (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  checkedOptions(LEAST_LATENCY, LEAST_LATENCY_OPTION_KEYS, options)
  const cursors = new WeakMap<readonly Endpoint[], ScanCursor>()
  return {
    name: LEAST_LATENCY,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      return pickLeastCost(scanCursorFor(cursors, candidates, deps.random), ctx.exclude)
    }
  }
}
