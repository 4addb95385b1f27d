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
import { type Balancer, type BalancerDeps, type Endpoint, type PickContext } from './types.ts'

export const ROUND_ROBIN = 'round_robin'

/** The mutable position of one rotation; an object so the WeakMap lookup is the only per-pick work. */
interface Cursor { next: number }

export function createRoundRobin (deps: BalancerDeps): Balancer {
  const cursors = new WeakMap<readonly Endpoint[], Cursor>()

  function cursorFor (candidates: readonly Endpoint[]): Cursor {
    let cursor = cursors.get(candidates)
    if (cursor === undefined) {
      // Allocated once per candidate set, not per pick.
      cursor = { next: Math.floor(deps.random() * candidates.length) }
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
      const exclude = ctx.exclude
      for (let k = 0; k < n; k++) {
        // The cursor can exceed n - 1 if a caller reuses an array whose length changed; the modulo keeps it valid.
        const i = (cursor.next + k) % n
        const endpoint = candidates[i]
        if (endpoint !== undefined && (exclude === undefined || !exclude.has(endpoint))) {
          cursor.next = (i + 1) % n
          return endpoint
        }
      }
      return undefined
    }
  }
}
