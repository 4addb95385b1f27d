/** HTTP headers Flotilla's tiers exchange beyond KServe v2; both tiers import them from here. */

/** A worker's pending request count (queued + executing), on every response; the gateway's balancers read it. */
export const QUEUE_DEPTH_HEADER = 'x-flotilla-queue-depth'

/** Reads a queue-depth header value; `undefined` when absent or not a non-negative integer. */
export function parseQueueDepth (value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string' || !/^[0-9]{1,9}$/.test(value)) return undefined
  return Number(value)
}

/**
 * Set (to `1`) on every response of a worker that is shutting down: it still serves what reaches it, but wants no
 * more. A gateway that sees it takes the worker out of rotation at once, without waiting for its health checks to
 * fail (Envoy's `x-envoy-immediate-health-check-fail`).
 */
export const WORKER_DRAINING_HEADER = 'x-flotilla-draining'
