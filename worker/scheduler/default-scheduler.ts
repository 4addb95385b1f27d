/**
 * The scheduler a model gets when its config has no `dynamic_batching`, as in Triton (triton-behaviour.md §6.1):
 * each request executes alone, in arrival order, on the first idle instance. No queue policy, priority or timeout
 * applies: a request's `priority` and `timeout` parameters are ignored.
 */
import { createError } from '../../common/errors.ts'
import { type BackendInstance, type BackendRequest, type BackendResponse } from '../backends/types.ts'
import { REAL_CLOCK } from './clock.ts'
import { Deque } from './deque.ts'
import { cancelled, cancelledAtOnce, NOOP_OBSERVER, onAbort } from './reporting.ts'
import { type Scheduler, type SchedulerClock, type SchedulerObserver, type SchedulerOptions } from './types.ts'

interface Pending {
  readonly request: BackendRequest
  readonly size: number
  readonly enqueueNs: bigint
  resolve: (r: BackendResponse) => void
  reject: (e: unknown) => void
  /** Stops listening to the client's signal (once the request leaves the queue). */
  unlisten: () => void
}

function noop (): void {}

export class DefaultScheduler implements Scheduler {
  readonly #modelName: string
  readonly #clock: SchedulerClock
  readonly #observer: SchedulerObserver
  readonly #idle: BackendInstance[]
  readonly #queue = new Deque<Pending>()
  #executing = 0
  #stopping = false
  #drainWaiters: Array<() => void> = []

  constructor (options: SchedulerOptions) {
    this.#modelName = options.modelName
    this.#clock = options.clock ?? REAL_CLOCK
    this.#observer = options.observer ?? NOOP_OBSERVER
    this.#idle = [...options.instances]
  }

  get queueDepth (): number { return this.#queue.length }
  get executing (): number { return this.#executing }

  enqueue (request: BackendRequest, signal?: AbortSignal): Promise<BackendResponse> {
    if (this.#stopping) return Promise.reject(createError('WRK_ERR_SERVER_NOT_READY'))
    if (signal?.aborted === true) return cancelledAtOnce(this.#observer, request)
    const item: Pending = {
      request,
      size: Math.max(1, request.batchSize),
      enqueueNs: this.#clock.now(),
      resolve: noop,
      reject: noop,
      unlisten: noop
    }
    const answer = new Promise<BackendResponse>((resolve, reject) => {
      item.resolve = resolve
      item.reject = reject
    })
    if (signal !== undefined) item.unlisten = onAbort(signal, () => { this.#cancel(item) })
    this.#queue.push(item)
    this.#dispatch()
    return answer
  }

  /** The client of a queued request went away: out of the queue (a running one finishes). */
  #cancel (item: Pending): void {
    if (!this.#queue.remove(item)) return
    item.reject(cancelled(this.#observer, item.size, this.#clock.now() - item.enqueueNs))
    this.#settleDrain()
  }

  #dispatch (): void {
    while (this.#idle.length > 0 && this.#queue.length > 0) {
      const instance = this.#idle.pop() as BackendInstance
      const item = this.#queue.shift() as Pending
      item.unlisten()
      this.#executing++
      const startNs = this.#clock.now()
      let execution: Promise<BackendResponse[]>
      try {
        execution = instance.execute([item.request])
      } catch (err) {
        execution = Promise.reject(err)
      }
      execution.then(
        responses => { this.#finish(instance, item, startNs, responses, false, undefined) },
        err => { this.#finish(instance, item, startNs, undefined, true, err) }
      )
    }
  }

  #finish (
    instance: BackendInstance, item: Pending, startNs: bigint, responses: BackendResponse[] | undefined, rejected: boolean, err: unknown
  ): void {
    const end = this.#clock.now()
    const inferNs = end - startNs
    this.#executing--
    this.#idle.push(instance)
    const timing = { queueNs: startNs - item.enqueueNs, computeInputNs: 0n, computeInferNs: inferNs, computeOutputNs: 0n }
    const total = end - item.enqueueNs
    const response = Array.isArray(responses) && responses.length === 1 ? responses[0] : undefined
    if (response !== undefined) {
      this.#observer.batchDone(item.size, 0n, inferNs, 0n)
      const ok = !('error' in response)
      this.#observer.requestDone(ok, ok ? undefined : 'BACKEND', item.size, total, timing)
      item.resolve(response)
    } else {
      const failure = rejected
        ? err
        : createError('WRK_ERR_EXECUTION_FAILED', this.#modelName,
          `the backend returned ${Array.isArray(responses) ? responses.length : 'no array of'} responses for a batch of 1 request`)
      this.#observer.requestDone(false, 'BACKEND', item.size, total, timing)
      item.reject(failure)
    }
    this.#dispatch()
    this.#settleDrain()
  }

  #settleDrain (): void {
    if (this.#stopping && this.#executing === 0 && this.#queue.length === 0) {
      const waiters = this.#drainWaiters
      this.#drainWaiters = []
      for (const resolve of waiters) resolve()
    }
  }

  async stop (): Promise<void> {
    this.#stopping = true
    if (this.#executing === 0 && this.#queue.length === 0) return
    await new Promise<void>(resolve => { this.#drainWaiters.push(resolve) })
  }
}
