/**
 * What both schedulers share: the no-op observer, the timing record of requests that never executed, and the answer
 * to a request cancelled before it was queued.
 */
import { createError, type FlotillaError } from '../../common/errors.ts'
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

/**
 * Reports a request whose client went away after `waitedNs` in the queue (a CANCELED failure, all of its time queue
 * time) and returns the error to reject it with.
 */
export function cancelled (observer: SchedulerObserver, size: number, waitedNs: bigint): FlotillaError {
  observer.requestDone(false, 'CANCELED', size, waitedNs, queuedOnly(waitedNs))
  return createError('WRK_ERR_REQUEST_CANCELLED')
}

/** A request whose client had gone before it could be queued: reported with no time, rejected. */
export function cancelledAtOnce (observer: SchedulerObserver, request: BackendRequest): Promise<BackendResponse> {
  return Promise.reject(cancelled(observer, Math.max(1, request.batchSize), 0n))
}

/** Calls `cancel` once `signal` aborts; returns what stops listening (when the request leaves the queue). */
export function onAbort (signal: AbortSignal, cancel: () => void): () => void {
  signal.addEventListener('abort', cancel, { once: true })
  return () => { signal.removeEventListener('abort', cancel) }
}
