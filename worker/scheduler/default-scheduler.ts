/**
 * The scheduler a model gets when its config has no `dynamic_batching`, as in Triton: each request executes
 * alone, in arrival order, on the first idle instance. No queue policy, priority or timeout applies.
 */
import { createError } from '../../common/errors.ts'
import { type BackendInstance, type BackendRequest, type BackendResponse } from '../backends/types.ts'
import { type Scheduler } from './types.ts'

interface Pending {
  request: BackendRequest
  resolve: (r: BackendResponse) => void
  reject: (e: unknown) => void
}

export class DefaultScheduler implements Scheduler {
  readonly #modelName: string
  readonly #idle: BackendInstance[]
  // A plain array used as a FIFO: shift() is O(n) but queues here are short, and a ring buffer comes with the batcher.
  readonly #queue: Pending[] = []
  #executing = 0
  #stopping = false
  #drained: (() => void) | undefined

  constructor (modelName: string, instances: readonly BackendInstance[]) {
    this.#modelName = modelName
    this.#idle = [...instances]
  }

  get queueDepth (): number { return this.#queue.length }
  get executing (): number { return this.#executing }

  enqueue (request: BackendRequest): Promise<BackendResponse> {
    if (this.#stopping) {
      return Promise.reject(createError('WRK_ERR_SERVER_NOT_READY'))
    }
    return new Promise((resolve, reject) => {
      this.#queue.push({ request, resolve, reject })
      this.#dispatch()
    })
  }

  #dispatch (): void {
    while (this.#idle.length > 0 && this.#queue.length > 0) {
      const instance = this.#idle.pop()!
      const item = this.#queue.shift()!
      this.#executing++
      // Through a promise chain, so a backend that throws synchronously fails the request, not the scheduler.
      Promise.resolve().then(() => instance.execute([item.request])).then(
        responses => {
          const response = responses[0]
          if (response === undefined) item.reject(createError('WRK_ERR_EXECUTION_FAILED', this.#modelName, 'the backend returned no response'))
          else item.resolve(response)
        },
        err => item.reject(err)
      ).finally(() => {
        this.#executing--
        this.#idle.push(instance)
        this.#dispatch()
        if (this.#stopping && this.#executing === 0 && this.#queue.length === 0) this.#drained?.()
      })
    }
  }

  async stop (): Promise<void> {
    this.#stopping = true
    if (this.#executing === 0 && this.#queue.length === 0) return
    await new Promise<void>(resolve => { this.#drained = resolve })
  }
}
