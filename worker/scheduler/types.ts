/**
 * A model version's scheduler takes ownership of each request and hands work to the version's instances
 * (Triton's Scheduler::Enqueue contract). Which scheduler a model gets is decided once, from its config.
 */
import { type BackendRequest, type BackendResponse } from '../backends/types.ts'

export interface Scheduler {
  /** Resolves with this request's response; rejects when its whole batch failed or the scheduler stopped. */
  enqueue (request: BackendRequest): Promise<BackendResponse>
  /** Requests received and not yet handed to an instance. */
  readonly queueDepth: number
  /** Requests handed to an instance and not yet answered. */
  readonly executing: number
  /** Stops accepting, waits for queued and executing requests to finish. */
  stop (): Promise<void>
}
