/**
 * Round robin: each request goes to the next candidate in turn.
 *
 * State is one cursor per candidate set (per model, in practice), so that traffic to one model does not shift the
 * rotation of another: with a single shared cursor, requests alternating between two models would all land on
 * the same server. The cursor starts at a random offset (through the injected `random`), so that gateway
 * replicas started together do not send their first requests to the same server in lock-step (Envoy seeds its
 * round robin the same way).
 *
 * Cursors live in a WeakMap keyed by the candidate array: the fleet keeps an array's identity until it changes,
 * and a replaced array (and its cursor) is then collected without any bookkeeping here.
 */
import { scanCopy } from './copy.ts'
import { checkedOptions, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const ROUND_ROBIN = 'round_robin'
/** Round robin takes no options. */
export const ROUND_ROBIN_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze([])

/**
 * The mutable position of one rotation, and the plain copy of the set that picks read (see `copy.ts`); an object so
 * the WeakMap lookup is the only per-pick work.
 */
interface Cursor {
  next: number
  readonly list: readonly Endpoint[]
}

/**
 * Round robin over the candidates in fleet order; weights are not looked at (`weighted` is the weighted rotation).
 *
 * @param options none are accepted; any key is a `GW_ERR_FLEET_INVALID`
 */
export function createRoundRobin (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  checkedOptions(ROUND_ROBIN, ROUND_ROBIN_OPTION_KEYS, options)
  const cursors = new WeakMap<readonly Endpoint[], Cursor>()

  function cursorFor (candidates: readonly Endpoint[]): Cursor {
    let cursor = cursors.get(candidates)
    if (cursor === undefined) {
      // Allocated once per candidate set, not per pick.
      cursor = { next: Math.floor(deps.random() * candidates.length), list: scanCopy(candidates) }
      cursors.set(candidates, cursor)
    }
    return cursor
  }

  return {
    name: ROUND_ROBIN,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      const n = candidates.length
      if (n === 0) return undefined
      const cursor = cursorFor(candidates)
      const list = cursor.list
      const exclude = ctx.exclude
      for (let k = 0; k < n; k++) {
        // The cursor can exceed n - 1 if a caller reuses an array whose length changed; the modulo keeps it valid.
        const i = (cursor.next + k) % n
        const endpoint = list[i]
        if (endpoint !== undefined && (exclude === undefined || !exclude.has(endpoint))) {
          cursor.next = (i + 1) % n
          return endpoint
        }
      }
      return undefined
    }
  }
}
