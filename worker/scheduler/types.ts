/**
 * A model version's scheduler takes ownership of each request and hands work to the version's instances
 * (Triton's Scheduler::Enqueue contract). Which scheduler a model gets is decided once, from its config
 * (`create-scheduler.ts`): the dynamic batcher with `dynamic_batching`, else one request at a time per instance.
 *
 * Schedulers report what happened to an observer ({@link SchedulerObserver}), which keeps Triton's statistics and
 * metrics (`worker/inference/statistics.ts`); time comes from an injected clock, so batch formation is tested with exact
 * sequences.
 */
import { type BackendInstance, type BackendRequest, type BackendResponse } from '../backends/types.ts'
import { type ModelConfig } from '../repository/types.ts'

export interface Scheduler {
  /**
   * Resolves with this request's response; rejects when its whole batch failed, when the queue is full
   * (`WRK_ERR_QUEUE_FULL`: 503 "Exceeds maximum queue size"), when it waited past its timeout
   * (`WRK_ERR_REQUEST_TIMEOUT`: 503 "Request timeout expired"), or when the scheduler stopped. The request's own
   * `priority` and `timeout` (µs) parameters are read from `request.parameters`, as Triton reads them.
   *
   * `signal` is the client's: aborted while the request is queued (its connection closed, its gRPC call cancelled),
   * the request leaves the queue at once and is rejected with `WRK_ERR_REQUEST_CANCELLED` (a CANCELED failure), as
   * Triton drops cancelled requests; once handed to an instance it runs to its end.
   */
  enqueue (request: BackendRequest, signal?: AbortSignal): Promise<BackendResponse>
  /** Requests received and not yet handed to an instance. */
  readonly queueDepth: number
  /** Requests handed to an instance and not yet answered. */
  readonly executing: number
  /** Stops accepting, waits for queued and executing requests to finish. */
  stop (): Promise<void>
}

/** Time for schedulers: nanoseconds from a monotonic clock, and timers; a fake one in tests. */
export interface SchedulerClock {
  /** Monotonic nanoseconds (`process.hrtime.bigint()` in production). */
  now (): bigint
  /** `setTimeout` semantics, in nanoseconds from now; the handle is opaque. */
  setTimeout (fn: () => void, ns: bigint): unknown
  clearTimeout (handle: unknown): void
}

/** Why a request failed, as Triton's `nv_inference_request_failure{reason}` labels it. */
export type FailureReason = 'REJECTED' | 'CANCELED' | 'BACKEND' | 'OTHER'

/**
 * Where one request's time went, in nanoseconds, as Triton's statistics split it: waiting in the queue, then its
 * batch's compute phases (each request of a batch is charged the whole batch's phase times, as Triton does).
 */
export interface RequestTiming {
  readonly queueNs: bigint
  readonly computeInputNs: bigint
  readonly computeInferNs: bigint
  readonly computeOutputNs: bigint
}

/**
 * What a scheduler reports; `worker/inference/statistics.ts` turns it into Triton's statistics and metrics. Called
 * synchronously on the scheduler's path: implementations only add numbers.
 */
export interface SchedulerObserver {
  /**
   * One request finished. `totalNs` runs from enqueue to its answer. A request that never reached an instance
   * (rejected, timed out in the queue) has zero compute times; `batchSize` is its own batch dimension (1 for models
   * without batching). A request refused because its queue is full is reported as a REJECTED failure with no time
   * (issue 5 asks for it to be counted; Triton's statistics leave it out, triton-behaviour.md §6.6, while its
   * `nv_inference_request_failure{reason="REJECTED"}` is where operators look for it). One refused because the
   * scheduler is stopping is not reported.
   */
  requestDone (ok: boolean, reason: FailureReason | undefined, batchSize: number, totalNs: bigint, timing: RequestTiming): void
  /** One execution on an instance: `size` inferences (the sum of its requests' batch sizes), its phase times. */
  batchDone (size: number, computeInputNs: bigint, computeInferNs: bigint, computeOutputNs: bigint): void
}

/** What {@link createScheduler} (in `create-scheduler.ts`) builds a scheduler from. */
export interface SchedulerOptions {
  readonly modelName: string
  readonly version: number
  readonly config: ModelConfig
  /** The version's instances: each executes one batch at a time. */
  readonly instances: readonly BackendInstance[]
  readonly observer?: SchedulerObserver
  /** Real time by default. */
  readonly clock?: SchedulerClock
}
