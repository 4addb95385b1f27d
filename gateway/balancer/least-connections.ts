/**
 * Least connections: the endpoint with the fewest requests in flight from this gateway, per unit of weight
 * (`inFlight / weight`, NGINX's `least_conn` rule; HAProxy's `leastconn`), ties broken round-robin.
 *
 * Why in-flight and not a rate: in-flight is exact, local and current (the proxy moves it before the request
 * leaves and when the exchange ends), so a burst spreads at once instead of piling onto whichever server looked
 * idle at the last measurement; a slow server keeps its requests longer and so gets fewer new ones, without any
 * latency tracking. What it cannot see is load from other gateway replicas or the worker's own queue:
 * `least_queue` adds that.
 *
 * Choices:
 * - The full scan is O(n) a pick, deterministic and without sampling noise; `p2c` is the O(1) alternative that
 *   also resists herding when several replicas share a fleet.
 * - `inFlight / weight`, not `(inFlight + 1) / weight`: an idle fleet with weights 2 and 1 rotates a, b and the
 *   heavier server pulls ahead as soon as requests overlap, which is NGINX's behaviour; weight 0 takes no traffic.
 * - Ties rotate (see `least-load.ts`) from a random start per candidate set, so replicas do not break their first
 *   ties in lock-step.
 */
import { pickLeastLoaded, scanCursorFor, type ScanCursor } from './least-load.ts'
import { checkedOptions, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const LEAST_CONNECTIONS = 'least_connections'
/** Least connections takes no options. */
export const LEAST_CONNECTIONS_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze([])

/**
 * Fewest in-flight requests per unit of weight; ties rotate.
 *
 * @param options none are accepted; any key is a `GW_ERR_FLEET_INVALID`
 */
export function createLeastConnections (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  checkedOptions(LEAST_CONNECTIONS, LEAST_CONNECTIONS_OPTION_KEYS, options)
  const cursors = new WeakMap<readonly Endpoint[], ScanCursor>()

  return {
    name: LEAST_CONNECTIONS,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      const cursor = scanCursorFor(cursors, candidates, deps.random)
      // No clock read: the load is in-flight alone.
      return pickLeastLoaded(cursor, ctx.exclude, 0, undefined)
    }
  }
}
