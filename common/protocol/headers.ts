/** HTTP headers Flotilla's tiers exchange beyond KServe v2; both tiers import them from here. */

/** A worker's pending request count (queued + executing), on every response; the gateway's balancers read it. */
export const QUEUE_DEPTH_HEADER = 'x-flotilla-queue-depth'
