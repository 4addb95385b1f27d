/**
 * Per-server concurrency limits with a gateway queue: HAProxy's `maxconn` / `timeout queue` / `maxqueue` for
 * inference. A server with `max_in_flight` N never has more than N requests from this gateway in flight; a request
 * that finds every server it could go to at its limit waits here, first come first served, and is handed the first
 * slot that frees on one of them. A request that waited `gateway.queue_timeout_ms`, or that arrives to a full queue,
 * gets a 503 with `Retry-After`, which tells a client to back off rather than pile on (HAProxy answers 503 too).
 *
 * Why queue in the gateway at all, when a worker has its own queue: a worker's queue is per worker, so a request
 * queued there is stuck behind that worker even when another frees up first; queued here, it goes to whichever
 * server frees first. Capping in-flight also keeps a slow server from soaking up an unbounded share of requests.
 *
 * The slot is the endpoint's `inFlight` count: {@link Admission.acquire} and {@link Admission.release} are the only
 * writers, and a hand-off from the queue moves a slot from the finished request to the waiting one without it ever
 * dropping below the limit in between (so a request arriving meanwhile cannot jump the queue).
 */
import { type Endpoint } from '../fleet/types.ts'
import { type Timers } from '../health/types.ts'

/** Queue settings, from the fleet file's `gateway` section. */
export interface AdmissionSettings {
  /** Most requests waiting at once; 0: no queue, a request that finds every server full is refused at once. */
  readonly maxQueued: number
  /** How long a request may wait for a slot. */
  readonly queueTimeoutMs: number
}

/** How a wait for a slot ended. On `admitted` the slot is already taken for the request. */
export type WaitResult =
  | { readonly outcome: 'admitted', readonly endpoint: Endpoint }
  | { readonly outcome: 'full' | 'timeout' | 'aborted' }

/** A minimal abort signal: Node's AbortSignal fits. */
export interface AbortSignalLike {
  readonly aborted: boolean
  addEventListener (type: 'abort', listener: () => void, options?: { once?: boolean }): void
  removeEventListener (type: 'abort', listener: () => void): void
}

interface Waiter {
  readonly candidates: readonly Endpoint[]
  readonly exclude: ReadonlySet<Endpoint> | undefined
  readonly settle: (result: WaitResult) => void
}

/** Whether `endpoint` may take one more request now (`maxInFlight` 0 means no limit). */
export function hasRoom (endpoint: Endpoint): boolean {
  return endpoint.maxInFlight === 0 || endpoint.inFlight < endpoint.maxInFlight
}

export class Admission {
  readonly #settings: AdmissionSettings
  readonly #timers: Timers
  readonly #queue: Waiter[] = []

  constructor (settings: AdmissionSettings, timers: Timers) {
    this.#settings = settings
    this.#timers = timers
  }

  /** Requests waiting for a slot now. */
  get waiting (): number {
    return this.#queue.length
  }

  /** Takes a slot on `endpoint` (the caller checked {@link hasRoom}, or does not apply limits: fan-out calls). */
  acquire (endpoint: Endpoint): void {
    endpoint.inFlight++
  }

  /** Gives a slot back; if a queued request can use `endpoint`, the slot goes straight to the first such request. */
  release (endpoint: Endpoint): void {
    endpoint.inFlight--
    // A draining endpoint's freed slot is not handed on: it takes no new requests.
    if (this.#queue.length === 0 || !hasRoom(endpoint) || endpoint.state !== 'active') return
    const i = this.#queue.findIndex((w) => w.candidates.includes(endpoint) && w.exclude?.has(endpoint) !== true)
    if (i < 0) return
    const [waiter] = this.#queue.splice(i, 1)
    endpoint.inFlight++
    waiter!.settle({ outcome: 'admitted', endpoint })
  }

  /**
   * Waits for a slot on one of `candidates` (never one in `exclude`), at most `min(queueTimeoutMs, maxWaitMs)`.
   * Resolves at once with `full` when the queue is full.
   *
   * @param maxWaitMs what is left of the request's own deadline
   * @param signal the client going away ends the wait (`aborted`) and frees its place
   */
  wait (
    candidates: readonly Endpoint[],
    exclude: ReadonlySet<Endpoint> | undefined,
    maxWaitMs: number,
    signal?: AbortSignalLike
  ): Promise<WaitResult> {
    if (this.#queue.length >= this.#settings.maxQueued) return Promise.resolve({ outcome: 'full' })
    if (signal?.aborted === true) return Promise.resolve({ outcome: 'aborted' })
    return new Promise((resolve) => {
      const leave = (result: WaitResult): void => {
        const i = this.#queue.indexOf(waiter)
        if (i >= 0) this.#queue.splice(i, 1)
        settle(result)
      }
      const onAbort = (): void => { leave({ outcome: 'aborted' }) }
      const timer = this.#timers.setTimeout(() => { leave({ outcome: 'timeout' }) },
        Math.max(0, Math.min(this.#settings.queueTimeoutMs, maxWaitMs)))
      let settled = false
      const settle = (result: WaitResult): void => {
        if (settled) return
        settled = true
        this.#timers.clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        resolve(result)
      }
      const waiter: Waiter = { candidates, exclude, settle }
      signal?.addEventListener('abort', onAbort, { once: true })
      this.#queue.push(waiter)
    })
  }
}
