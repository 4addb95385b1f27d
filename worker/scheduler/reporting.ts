/** What both schedulers share: the no-op observer, and the timing record of requests that never executed. */
import { type RequestTiming, type SchedulerObserver } from './types.ts'

/** Used when no observer is given, so the hot path never branches on it. */
export const NOOP_OBSERVER: SchedulerObserver = {
  requestDone () {},
  batchDone () {}
}

/** A request that left the queue without executing: all of its time was queue time. */
export function queuedOnly (queueNs: bigint): RequestTiming {
  return { queueNs, computeInputNs: 0n, computeInferNs: 0n, computeOutputNs: 0n }
}
