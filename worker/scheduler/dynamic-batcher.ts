/**
 * The dynamic batcher (Triton's `DynamicBatchScheduler` with `dynamic_batching` set; triton-behaviour.md §6): one
 * priority queue per model version, one timer, and the version's instances, each executing one batch at a time.
 *
 * Life of a request:
 *   enqueue()  level from its `priority`, refuse if the level is full (503 "Exceeds maximum queue size"),
 *              deadline from the queue policy and its `timeout`, push, schedule one pump (a microtask, so requests
 *              that arrive in the same turn are looked at together)
 *   pump       apply timeouts (REJECT: 503 "Request timeout expired"; DELAY: move behind), then while an instance
 *              is idle: formBatch() (batch-former.ts) -> send the batch, or wait for the delay; arm the timer for
 *              the earliest of "delay over" and "next request timeout", so both happen on time with no new arrival
 *   execute    instance.execute(requests); each request is answered with its own response, in the order they
 *              were dequeued when preserve_ordering is set (held until every earlier request is answered)
 *
 * Everything that decides is synchronous and reads time only from the injected clock; tests drive it with a fake one.
 */
import { createError } from '../../common/errors.ts'
import { type BackendInstance, type BackendRequest, type BackendResponse } from '../backends/types.ts'
import { type DynamicBatching } from '../repository/types.ts'
import { batchRules, type BatchRules, type FormableItem, formBatch, ShapeCheck } from './batch-former.ts'
import { mergeInputs, splitOutputs } from './batch-tensors.ts'
import { REAL_CLOCK } from './clock.ts'
import { Deque } from './deque.ts'
import { NO_DEADLINE, PriorityRequestQueue, requestPriority, requestTimeoutUs } from './priority-queue.ts'
import { cancelled, cancelledAtOnce, NOOP_OBSERVER, onAbort, queuedOnly } from './reporting.ts'
import { type Scheduler, type SchedulerClock, type SchedulerObserver, type SchedulerOptions } from './types.ts'

/** `dynamic_batching {}`: what a config with an empty block means. */
export const DEFAULT_DYNAMIC_BATCHING: DynamicBatching = {
  preferred_batch_size: [],
  max_queue_delay_microseconds: 0,
  preserve_ordering: false,
  priority_levels: 0,
  default_priority_level: 0,
  default_queue_policy: { timeout_action: 'REJECT', default_timeout_microseconds: 0, allow_timeout_override: false, max_queue_size: 0 },
  priority_queue_policy: {}
}

/** One request from enqueue to its answer. */
class Entry implements FormableItem {
  readonly request: BackendRequest
  readonly size: number
  readonly enqueueNs: bigint
  deadlineNs: bigint
  resolve: (response: BackendResponse) => void = noop
  reject: (err: unknown) => void = noop
  /** When its batch went to an instance. */
  startNs = 0n
  /** Its batch's execute() time. */
  inferNs = 0n
  /** Its batch's time merging inputs and splitting outputs (merged batches only). */
  inputNs = 0n
  outputNs = 0n
  /** Stops listening to the client's signal (once the request leaves the queue). */
  unlisten: () => void = noop
  /** Answered by the instance (kept here until delivered when preserve_ordering holds it back). */
  done = false
  response: BackendResponse | undefined = undefined
  error: unknown = undefined

  constructor (request: BackendRequest, enqueueNs: bigint, deadlineNs: bigint) {
    this.request = request
    this.size = Math.max(1, request.batchSize)
    this.enqueueNs = enqueueNs
    this.deadlineNs = deadlineNs
  }
}

function noop (): void {}

/** A merged batch's compute_input and compute_output times, filled in as it runs. */
interface Phases { inputNs: bigint, outputNs: bigint }

/** Whether every request of a batch has the same inputs (an optional input given by some only cannot be merged). */
function sameInputs (requests: readonly BackendRequest[]): boolean {
  const first = requests[0]!.inputs
  for (let i = 1; i < requests.length; i++) {
    const inputs = requests[i]!.inputs
    if (inputs.size !== first.size) return false
    for (const name of inputs.keys()) if (!first.has(name)) return false
  }
  return true
}

export class DynamicBatcher implements Scheduler {
  readonly #modelName: string
  readonly #clock: SchedulerClock
  readonly #observer: SchedulerObserver
  readonly #rules: BatchRules
  readonly #shapes: ShapeCheck | undefined
  readonly #queue: PriorityRequestQueue<Entry>
  /** Dispatched requests in dequeue order, when preserve_ordering is set. */
  readonly #ordered: Deque<Entry> | undefined
  readonly #idle: BackendInstance[]
  #executing = 0
  #pumpQueued = false
  #timer: unknown = undefined
  #timerAt = NO_DEADLINE
  #stopping = false
  #drainWaiters: Array<() => void> = []

  readonly #pump = (): void => { this.#runPump() }
  readonly #onTimer = (): void => {
    this.#timer = undefined
    this.#timerAt = NO_DEADLINE
    this.#runPump()
  }

  constructor (options: SchedulerOptions) {
    const batching = options.config.dynamic_batching ?? DEFAULT_DYNAMIC_BATCHING
    this.#modelName = options.modelName
    this.#clock = options.clock ?? REAL_CLOCK
    this.#observer = options.observer ?? NOOP_OBSERVER
    this.#rules = batchRules(options.config)
    this.#shapes = ShapeCheck.fromConfig(options.config)
    this.#queue = new PriorityRequestQueue<Entry>(batching)
    this.#ordered = batching.preserve_ordering ? new Deque<Entry>() : undefined
    this.#idle = [...options.instances]
  }

  get queueDepth (): number { return this.#queue.size }
  get executing (): number { return this.#executing }

  enqueue (request: BackendRequest, signal?: AbortSignal): Promise<BackendResponse> {
    if (this.#stopping) return Promise.reject(createError('WRK_ERR_SERVER_NOT_READY'))
    if (signal?.aborted === true) return cancelledAtOnce(this.#observer, request)
    const level = this.#queue.levelIndexOf(requestPriority(request.parameters))
    // Refused before it is queued, as Triton's PriorityQueue::Enqueue does. Counted as a REJECTED failure (issue 5:
    // "these are counted"), with no time spent: an operator must see a model shedding load in its metrics.
    if (this.#queue.isFull(level)) {
      this.#observer.requestDone(false, 'REJECTED', Math.max(1, request.batchSize), 0n, queuedOnly(0n))
      return Promise.reject(createError('WRK_ERR_QUEUE_FULL'))
    }
    const now = this.#clock.now()
    const entry = new Entry(request, now, this.#queue.deadlineFor(level, requestTimeoutUs(request.parameters), now))
    const answer = new Promise<BackendResponse>((resolve, reject) => {
      entry.resolve = resolve
      entry.reject = reject
    })
    this.#queue.push(entry, level)
    if (signal !== undefined) entry.unlisten = onAbort(signal, () => { this.#cancel(entry) })
    if (!this.#pumpQueued) {
      this.#pumpQueued = true
      queueMicrotask(this.#pump)
    }
    return answer
  }

  /** The client of a request went away: out of the queue if it is still there (a running one finishes). */
  #cancel (entry: Entry): void {
    if (!this.#queue.remove(entry)) return
    entry.reject(cancelled(this.#observer, entry.size, this.#clock.now() - entry.enqueueNs))
    // The batch the pump waits for may have lost its oldest request, and a stopping batcher may now be drained.
    if (!this.#pumpQueued) {
      this.#pumpQueued = true
      queueMicrotask(this.#pump)
    }
  }

  async stop (): Promise<void> {
    this.#stopping = true
    if (this.#isDrained()) {
      this.#disarm()
      return
    }
    // Nothing more can join a batch, so a batch waiting for its delay goes now.
    if (!this.#pumpQueued) {
      this.#pumpQueued = true
      queueMicrotask(this.#pump)
    }
    await new Promise<void>(resolve => { this.#drainWaiters.push(resolve) })
  }

  #runPump (): void {
    this.#pumpQueued = false
    const now = this.#clock.now()
    if (now > this.#queue.nextDeadlineNs) this.#expire(now)

    let wakeAt = NO_DEADLINE
    while (this.#idle.length > 0 && this.#queue.size > 0) {
      const formation = formBatch(this.#queue.levels, now, this.#rules, this.#shapes, this.#stopping)
      if (formation.kind === 'send') {
        this.#dispatch(formation.count, formation.size, now)
      } else {
        if (formation.kind === 'wait') wakeAt = formation.untilNs
        break
      }
    }
    // Triton expires a request once now > its deadline: look 1 ns after the earliest one.
    if (this.#queue.size > 0 && this.#queue.nextDeadlineNs !== NO_DEADLINE && this.#queue.nextDeadlineNs + 1n < wakeAt) {
      wakeAt = this.#queue.nextDeadlineNs + 1n
    }
    this.#arm(wakeAt, now)
    this.#settleDrain()
  }

  #expire (now: bigint): void {
    const rejected: Entry[] = []
    this.#queue.expire(now, rejected)
    for (const entry of rejected) {
      entry.unlisten()
      const waited = now - entry.enqueueNs
      this.#observer.requestDone(false, 'REJECTED', entry.size, waited, queuedOnly(waited))
      entry.reject(createError('WRK_ERR_REQUEST_TIMEOUT'))
    }
  }

  /** Hands the first `count` queued requests to an idle instance. */
  #dispatch (count: number, size: number, now: bigint): void {
    const instance = this.#idle.pop() as BackendInstance
    const entries = new Array<Entry>(count)
    const requests = new Array<BackendRequest>(count)
    for (let i = 0; i < count; i++) {
      const entry = this.#queue.shift() as Entry
      entry.unlisten()
      entry.startNs = now
      entries[i] = entry
      requests[i] = entry.request
      this.#ordered?.push(entry)
    }
    this.#executing += count
    const phases: Phases = { inputNs: 0n, outputNs: 0n }
    let execution: Promise<BackendResponse[]>
    try {
      execution = instance.mergedBatches === true && count > 1 && sameInputs(requests)
        ? this.#executeMerged(instance, requests, phases)
        : instance.execute(requests)
    } catch (err) {
      execution = Promise.reject(err)
    }
    execution.then(
      responses => { this.#completed(instance, entries, size, now, responses, phases) },
      err => { this.#failed(instance, entries, now, err) }
    )
  }

  /**
   * One execution of a batch as one request: inputs concatenated along the batch dimension (one copy), each
   * output split back into per-request views (no copy). The two phases are Triton's compute_input and
   * compute_output.
   */
  async #executeMerged (instance: BackendInstance, requests: BackendRequest[], phases: Phases): Promise<BackendResponse[]> {
    const clock = this.#clock
    const t0 = clock.now()
    const wanted = new Set<string>()
    let batchSize = 0
    for (const r of requests) {
      batchSize += Math.max(1, r.batchSize)
      for (const name of r.requestedOutputs) wanted.add(name)
    }
    const merged: BackendRequest = {
      inputs: mergeInputs(requests),
      requestedOutputs: [...wanted],
      // Per-request parameters cannot be merged; the first request's stand for the batch, as in Triton's backends.
      parameters: requests[0]!.parameters,
      batchSize
    }
    phases.inputNs = clock.now() - t0
    const [response] = await instance.execute([merged])
    const t1 = clock.now()
    let out: BackendResponse[]
    if (response === undefined) {
      throw createError('WRK_ERR_EXECUTION_FAILED', this.#modelName, 'the backend returned no response for a merged batch')
    } else if ('error' in response) {
      out = requests.map(() => response)
    } else {
      const parts = splitOutputs(response.outputs, requests)
      out = parts.map((outputs) => ({ outputs }))
    }
    phases.outputNs = clock.now() - t1
    return out
  }

  #completed (instance: BackendInstance, entries: Entry[], size: number, startNs: bigint, responses: BackendResponse[], phases: Phases): void {
    if (!Array.isArray(responses) || responses.length !== entries.length) {
      const count = Array.isArray(responses) ? String(responses.length) : 'no array of'
      this.#failed(instance, entries, startNs, createError('WRK_ERR_EXECUTION_FAILED', this.#modelName,
        `the backend returned ${count} responses for a batch of ${entries.length} requests`))
      return
    }
    const end = this.#clock.now()
    const inferNs = end - startNs - phases.inputNs - phases.outputNs
    this.#idle.push(instance)
    this.#observer.batchDone(size, phases.inputNs, inferNs, phases.outputNs)
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[i] as Entry
      entry.inferNs = inferNs
      entry.inputNs = phases.inputNs
      entry.outputNs = phases.outputNs
      entry.response = responses[i]
      entry.done = true
    }
    this.#answer(entries, end)
  }

  /** The whole batch failed: every request of it fails, reason BACKEND. */
  #failed (instance: BackendInstance, entries: Entry[], startNs: bigint, err: unknown): void {
    const end = this.#clock.now()
    this.#idle.push(instance)
    for (const entry of entries) {
      entry.inferNs = end - startNs
      entry.error = err
      entry.done = true
    }
    this.#answer(entries, end)
  }

  #answer (entries: Entry[], now: bigint): void {
    const ordered = this.#ordered
    if (ordered === undefined) {
      for (const entry of entries) this.#deliver(entry, now)
    } else {
      while (ordered.peek()?.done === true) this.#deliver(ordered.shift() as Entry, now)
    }
    if (this.#queue.size > 0) {
      if (!this.#pumpQueued) {
        this.#pumpQueued = true
        queueMicrotask(this.#pump)
      }
    } else {
      this.#settleDrain()
    }
  }

  #deliver (entry: Entry, now: bigint): void {
    this.#executing--
    const timing = { queueNs: entry.startNs - entry.enqueueNs, computeInputNs: entry.inputNs, computeInferNs: entry.inferNs, computeOutputNs: entry.outputNs }
    const response = entry.response
    if (response !== undefined) {
      const ok = !('error' in response)
      this.#observer.requestDone(ok, ok ? undefined : 'BACKEND', entry.size, now - entry.enqueueNs, timing)
      entry.resolve(response)
    } else {
      this.#observer.requestDone(false, 'BACKEND', entry.size, now - entry.enqueueNs, timing)
      entry.reject(entry.error)
    }
    // Let the request's data go: a held entry could otherwise pin tensors until the queue moves on.
    entry.response = undefined
    entry.error = undefined
  }

  /** Makes sure the pump runs by `at` (NO_DEADLINE: no timer needed). An earlier timer is kept: it re-arms. */
  #arm (at: bigint, now: bigint): void {
    if (at === NO_DEADLINE) {
      this.#disarm()
      return
    }
    if (this.#timer !== undefined) {
      if (this.#timerAt <= at) return
      this.#clock.clearTimeout(this.#timer)
    }
    this.#timerAt = at
    this.#timer = this.#clock.setTimeout(this.#onTimer, at > now ? at - now : 0n)
  }

  #disarm (): void {
    if (this.#timer === undefined) return
    this.#clock.clearTimeout(this.#timer)
    this.#timer = undefined
    this.#timerAt = NO_DEADLINE
  }

  #isDrained (): boolean {
    return this.#queue.size === 0 && this.#executing === 0
  }

  #settleDrain (): void {
    if (!this.#stopping || !this.#isDrained() || this.#drainWaiters.length === 0) return
    this.#disarm()
    const waiters = this.#drainWaiters
    this.#drainWaiters = []
    for (const resolve of waiters) resolve()
  }
}
