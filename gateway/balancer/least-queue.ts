/**
 * Least queue: the endpoint with the least outstanding work per unit of weight, where outstanding work is this
 * gateway's in-flight requests plus the queue depth the worker last reported, as long as that report is fresh.
 * Ties rotate round-robin (see `least-load.ts`).
 *
 * What the two numbers count, and why they are added:
 *
 *     gateway ──(on the wire)──▶ worker queue ──▶ executing ──(response on the wire)──▶ gateway
 *     inFlight:  every request of ours, at any stage above
 *     queueDepth: requests waiting in the worker's queue, from every gateway replica, at report time
 *
 * In-flight alone is blind to other replicas' traffic and to a worker that has slowed down; the reported depth
 * alone is blind to what we sent since the report (requests on the wire, requests that started executing) and is
 * as old as the report. The sum sees both. It counts our own requests that sit in the worker's queue twice; that
 * overlap weighs queued work above executing work, which is the right bias: a request queued behind others is what
 * delays the next one. Example: two workers each with 4 of our requests, one running all 4 (queue 0), one running
 * 1 with 3 queued: the sum gives 4 and 7 and picks the first, where in-flight alone would see a tie. This is the
 * "gateway in-flight + worker pending count" combination that `gateway-anchors.md` (d)5 proposes for Triton fleets
 * (`nv_inference_pending_request_count`), as Ray Serve and the inference-extension EPP route on queue length.
 *
 * Staleness: a report older than `staleAfterMs` (default 2000 ms, measured with the injected `now`), or one never
 * made (`queueDepthAt` of -Infinity or NaN), is ignored and that endpoint is judged by in-flight alone, the
 * gateway's own exact number. Treating an unknown queue as empty sends that endpoint some traffic, and its
 * responses bring a fresh report; the health checker refreshes idle ones. A negative or NaN depth counts as 0.
 *
 * Known limit: a full scan on shared, delayed data lets several gateway replicas pick the same worker between two
 * reports (the herd the EPP README warns of). Each replica's own in-flight rises with every pick, which spreads
 * its own burst at once; across replicas `p2c` sampling is the usual cure, and a queue-aware p2c is a follow-up.
 */
import { pickLeastLoaded, scanCursorFor, type ScanCursor } from './least-load.ts'
import { checkedOptions, DEFAULT_STALE_AFTER_MS, type BalancerOptionKey } from './options.ts'
import { type Balancer, type BalancerDeps, type BalancerOptions, type Endpoint, type PickContext } from './types.ts'

export const LEAST_QUEUE = 'least_queue'
/** Least queue takes `staleAfterMs`. */
export const LEAST_QUEUE_OPTION_KEYS: readonly BalancerOptionKey[] = Object.freeze(['staleAfterMs'])

/**
 * Least in-flight plus fresh reported queue depth, per unit of weight; ties rotate.
 *
 * @param options `staleAfterMs` (default {@link DEFAULT_STALE_AFTER_MS}); other keys are a `GW_ERR_FLEET_INVALID`
 */
export function createLeastQueue (deps: BalancerDeps, options?: BalancerOptions): Balancer {
  const staleAfterMs = checkedOptions(LEAST_QUEUE, LEAST_QUEUE_OPTION_KEYS, options).staleAfterMs ??
    DEFAULT_STALE_AFTER_MS
  const cursors = new WeakMap<readonly Endpoint[], ScanCursor>()

  return {
    name: LEAST_QUEUE,
    pick (candidates: readonly Endpoint[], ctx: PickContext): Endpoint | undefined {
      if (candidates.length === 0) return undefined
      const cursor = scanCursorFor(cursors, candidates, deps.random)
      // The clock is read once a pick; the load rule itself is in `least-load.ts`.
      return pickLeastLoaded(cursor, ctx.exclude, deps.now(), staleAfterMs)
    }
  }
}
