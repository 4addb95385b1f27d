/** HTTP headers Flotilla's tiers exchange beyond KServe v2; both tiers import them from here. */

/** A worker's pending request count (queued + executing), on every response; the gateway's balancers read it. */
export const QUEUE_DEPTH_HEADER = 'x-flotilla-queue-depth'

/** Reads a queue-depth header value; `undefined` when absent or not a non-negative integer. */
export function parseQueueDepth (value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string' || !/^[0-9]{1,9}$/.test(value)) return undefined
  return Number(value)
}
