/**
 * What both schedulers share: the no-op observer, the timing record of requests that never executed, and the answer
 * to a request cancelled before it was queued.
 */
import { createError } from '../../common/errors.ts'
import { type BackendRequest, type BackendResponse } from '../backends/types.ts'
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

/** A request whose client had gone before it could be queued: a CANCELED failure with no time, rejected. */
export function cancelledAtOnce (observer: SchedulerObserver, request: BackendRequest): Promise<BackendResponse> {
  observer.requestDone(false, 'CANCELED', Math.max(1, request.batchSize), 0n, queuedOnly(0n))
  return Promise.reject(createError('WRK_ERR_REQUEST_CANCELLED'))
}
